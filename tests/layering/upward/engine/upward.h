// Test input: a header of a lower layer that includes one above it.
#pragma once

#include "step/stage.h"
