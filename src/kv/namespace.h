// Namespace is part of the public API (include/kvtier/namespace.h).
#pragma once

#include "kvtier/namespace.h"
