/* registry.h: the Ocean envs compiled into appliance._ocean, one line each.
 * Each header ends with OCEAN_ENV(...), which registers it; adding an env is its header and a line
 * here (docs/writing-an-env.md). A YAML in appliance/defaults/envs/ is optional: tuned values only. */
#include "benchmark.h"
#include "breakout.h"
#include "connect4.h"
#include "g2048.h"
#include "go.h"
#include "platformer.h"
#include "pong.h"
#include "snake.h"
#include "squared.h"
#include "target.h"
