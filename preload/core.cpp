// Preload core placeholder until the sampler lands.
#include "preload/unwinder.h"
