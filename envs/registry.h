/* registry.h: the Ocean envs compiled into appliance._ocean, one line each.
 * Each header ends with OCEAN_ENV(...), which registers it; adding an env is its header, a line
 * here and its YAML in appliance/config/envs/. */
#include "squared.h"
