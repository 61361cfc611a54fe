/* The floor of wrapping CPython's allocator (bench/py_alloc_floor.sh): MEM and OBJ domain
 * wrappers that only forward to the saved allocator (no guard, no countdown, no sampling), to
 * compare with mlprof's wrappers. Loaded into a running interpreter with ctypes.PyDLL; install(3)
 * wraps both domains (1: MEM only, 2: OBJ only). Built by the script; no Python headers needed. */
#include <stddef.h>

typedef struct {
  void* ctx;
  void* (*malloc)(void* ctx, size_t size);
  void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
  void* (*realloc)(void* ctx, void* ptr, size_t size);
  void (*free)(void* ctx, void* ptr);
} Allocator; /* PyMemAllocatorEx */

void PyMem_GetAllocator(int domain, Allocator* out);
void PyMem_SetAllocator(int domain, Allocator* in);

static Allocator saved[3];

#define WRAPPERS(D)                                                                              \
  static void* malloc_##D(void* c, size_t n) { (void)c; return saved[D].malloc(saved[D].ctx, n); } \
  static void* calloc_##D(void* c, size_t a, size_t b) {                                        \
    (void)c;                                                                                     \
    return saved[D].calloc(saved[D].ctx, a, b);                                                  \
  }                                                                                              \
  static void* realloc_##D(void* c, void* p, size_t n) {                                        \
    (void)c;                                                                                     \
    return saved[D].realloc(saved[D].ctx, p, n);                                                 \
  }                                                                                              \
  static void free_##D(void* c, void* p) { (void)c; saved[D].free(saved[D].ctx, p); }
WRAPPERS(1)
WRAPPERS(2)

int install(int domains) {
  if (domains & 1) {
    PyMem_GetAllocator(1, &saved[1]);
    Allocator a = {0, malloc_1, calloc_1, realloc_1, free_1};
    PyMem_SetAllocator(1, &a);
  }
  if (domains & 2) {
    PyMem_GetAllocator(2, &saved[2]);
    Allocator a = {0, malloc_2, calloc_2, realloc_2, free_2};
    PyMem_SetAllocator(2, &a);
  }
  return 0;
}
