// The profile file format lives here; see profile/model.h and docs/profile-format.md.
#include "profile/model.h"
