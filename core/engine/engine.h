// The training engine, whole: what a run is given (training_options.h), the state the oracles
// compare (training_state.h), the engine of one rank (rank_engine.h, with the order of one step and
// why runs at different world sizes give the same bits), and the drivers that run W ranks
// (training_run.h). Include the one you need; this header is for code that uses all four.
#pragma once

#include "core/engine/rank_engine.h"
#include "core/engine/training_options.h"
#include "core/engine/training_run.h"
#include "core/engine/training_state.h"
