// Status and Result<T> are part of the public API (include/kvtier/status.h);
// modules include them through this header.
#pragma once

#include "kvtier/status.h"
