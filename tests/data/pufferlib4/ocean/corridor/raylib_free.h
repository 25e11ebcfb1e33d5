/* The corridor test env draws nothing, so it needs no raylib: this header stands where a PufferLib
 * env includes raylib.h. */
#pragma once
