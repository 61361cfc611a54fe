// Collector: stream decoding, symbolization and profile building.
#include "profile/model.h"
