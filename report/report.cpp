// Report: terminal summary, HTML and exports.
#include "profile/model.h"
