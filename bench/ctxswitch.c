/* Two threads passing one byte back and forth through two pipes: every round trip is two
 * context switches (both threads pinned to one core by bench/ctxswitch_cost.sh, so that each
 * switch goes straight from one thread to the other, with no idle or cross-core wake-up).
 * Prints microseconds per round trip. Usage: ctxswitch ROUND_TRIPS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ping[2], pong[2];
static long trips;

static void* peer(void* arg) {
  char c;
  (void)arg;
  for (long i = 0; i < trips; i++) {
    if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1) break;
  }
  return NULL;
}

int main(int argc, char** argv) {
  trips = argc > 1 ? atol(argv[1]) : 200000;
  if (trips <= 0 || pipe(ping) != 0 || pipe(pong) != 0) return 2;
  pthread_t t;
  if (pthread_create(&t, NULL, peer, NULL) != 0) return 2;
  struct timespec s, e;
  char c = 'x';
  clock_gettime(CLOCK_MONOTONIC, &s);
  for (long i = 0; i < trips; i++) {
    if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) return 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &e);
  pthread_join(t, NULL);
  printf("%.3f\n", ((e.tv_sec - s.tv_sec) * 1e9 + (e.tv_nsec - s.tv_nsec)) / trips / 1000.0);
  return 0;
}
