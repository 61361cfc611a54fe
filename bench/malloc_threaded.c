/* glibc's malloc in a process that has, or has not, a second thread: malloc + free of one block
 * of SIZE bytes, N times, timed on the thread's CPU clock. With "threaded" an idle thread is
 * started first (as mlprof's writer thread is in every profiled process); glibc then locks its
 * arena for every request that its per-thread cache (tcache, up to 1032 bytes) does not serve.
 * Prints nanoseconds per malloc/free pair. Usage: malloc_threaded N SIZE [threaded] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void* idle(void* arg) {
  for (;;) pause();
  return arg;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  long n = atol(argv[1]);
  size_t size = (size_t)atol(argv[2]);
  if (argc > 3 && strcmp(argv[3], "threaded") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, idle, NULL) != 0) return 2;
  }
  struct timespec s, e;
  void* volatile keep = NULL;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &s);
  for (long i = 0; i < n; i++) {
    void* p = malloc(size);
    keep = p;
    free(p);
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &e);
  printf("%.2f\n", ((e.tv_sec - s.tv_sec) * 1e9 + (e.tv_nsec - s.tv_nsec)) / (double)n);
  (void)keep;
  return 0;
}
