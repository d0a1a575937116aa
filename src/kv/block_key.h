// Block keys are part of the public API (include/kvtier/block_key.h).
#pragma once

#include "kvtier/block_key.h"
