// checks.h: host-side argument checks for the kernel entry points. Each check is one small predicate
// that, when it fails, throws std::invalid_argument with a message naming the argument and the limit
// (pybind11 turns it into a Python ValueError). The Python shim runs its own, cheaper selection
// first; these are the last line of defence for direct _C callers, so a bad call never reaches a
// kernel as an illegal memory access or a silently wrong answer.
#pragma once

#include <cstdint>
#include <string>

#include "flashsdpa/params.h"

namespace flashsdpa {

void check_fwd_params(const AttnFwdParams& p);
void check_bwd_params(const AttnBwdParams& p);

struct BiasCellsSpec;
// _C.bias_cells's arguments (api.h), before they are narrowed to BiasCellsParams' int32 fields.
void check_bias_cells_spec(const BiasCellsSpec& s);

}  // namespace flashsdpa
