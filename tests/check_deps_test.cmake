# test_check_deps: the module dependency check (cmake/check_deps.cmake) run on small fixture
# trees written here: a tree that keeps every arrow passes, each forbidden include fails with a
# message naming the file and the arrow. Run: cmake -DPL_SOURCE_DIR=... -DPL_WORK=... -P this.

set(_check "${PL_SOURCE_DIR}/cmake/check_deps.cmake")
file(REMOVE_RECURSE "${PL_WORK}")
set(_failures 0)

# Write a fixture tree: pairs of (relative path, one line of content).
function(_tree name)
  set(_args ${ARGN})
  list(LENGTH _args _n)
  math(EXPR _last "${_n} - 1")
  foreach(_i RANGE 0 ${_last} 2)
    math(EXPR _j "${_i} + 1")
    list(GET _args ${_i} _path)
    list(GET _args ${_j} _text)
    file(WRITE "${PL_WORK}/${name}/${_path}" "/* fixture */\n${_text}\nint x;\n")
  endforeach()
endfunction()

# Run the check on tree `name`; want_ok TRUE/FALSE; `expect` must appear in the output on failure.
function(_expect name want_ok expect)
  execute_process(COMMAND ${CMAKE_COMMAND} -DPL_ROOT=${PL_WORK}/${name} -P ${_check}
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  set(_all "${_out}${_err}")
  if(want_ok AND NOT _rc EQUAL 0)
    message(SEND_ERROR "${name}: expected to pass, failed:\n${_all}")
  elseif(NOT want_ok AND _rc EQUAL 0)
    message(SEND_ERROR "${name}: expected to fail, passed")
  elseif(NOT want_ok)
    string(REPLACE "\n" "" _flat "${_all}")
    string(REGEX REPLACE "[ \t]+" " " _flat "${_flat}")
    string(FIND "${_flat}" "${expect}" _at)
    if(_at LESS 0)
      message(SEND_ERROR "${name}: failed without '${expect}':\n${_all}")
    endif()
  endif()
endfunction()

_tree(ok
  tools/a.c "#include \"scheduler/plan.h\"\n#include \"pipeline/gen.h\"\n#include \"transport/ctl.h\""
  daemon/b.c "#include \"backends/backend.h\"\n#include \"scheduler/modes.h\""
  pipeline/c.c "#include \"backends/backend.h\"\n#include \"transport/act.h\""
  scheduler/d.c "#include \"model/model.h\"\n#include \"common/status.h\"\n#include \"scheduler/plan_impl.h\""
  backends/e.c "#include \"backends/backend_impl.h\"\n#include \"model/model.h\"\n#include \"local.h\""
  transport/f.c "#include <zmq.h>\n#include <ucp/api/ucp.h>"
  common/g.c "#include <stdio.h>\n#include \"common/util.h\"")
_expect(ok TRUE "")

_tree(tools_daemon tools/a.c "#include \"daemon/coord.h\"")
_expect(tools_daemon FALSE "tools/a.c: includes \"daemon/coord.h\": tools/ may not depend on daemon/")
_tree(tools_backends tools/a.c "#include \"backends/backend.h\"")
_expect(tools_backends FALSE "tools/ may not depend on backends/")
_tree(scheduler_pipeline scheduler/a.h "#include \"pipeline/gen.h\"")
_expect(scheduler_pipeline FALSE "scheduler/a.h: includes \"pipeline/gen.h\": scheduler/ may not depend on pipeline/")
_tree(model_backends model/a.c "#include \"backends/backend.h\"")
_expect(model_backends FALSE "model/ may not depend on backends/")
_tree(common_model common/a.c "#include \"model/model.h\"")
_expect(common_model FALSE "common/ may not depend on model/")
_tree(backends_pipeline backends/cpu/a.c "#include \"pipeline/exec.h\"")
_expect(backends_pipeline FALSE "backends/cpu/a.c: includes \"pipeline/exec.h\"")
_tree(internal pipeline/a.c "#include \"backends/backend_impl.h\"")
_expect(internal FALSE "pipeline/a.c: includes \"backends/backend_impl.h\", an internal header of backends/")
_tree(internal_int daemon/a.c "#include \"transport/ucx_int.h\"")
_expect(internal_int FALSE "an internal header of transport/")
_tree(zmq_outside model/a.c "#include <zmq.h>")
_expect(zmq_outside FALSE "model/a.c: includes <zmq.h...>: only transport/ talks ZeroMQ or UCX")
_tree(ucp_outside pipeline/a.c "#include <ucp/api/ucp.h>")
_expect(ucp_outside FALSE "pipeline/a.c: includes <ucp/...>")
_tree(into_tests pipeline/a.c "#include \"tests/cluster_util.h\"")
_expect(into_tests FALSE "pipeline/a.c: includes \"tests/cluster_util.h\": no module depends on tests/")
_tree(spaced daemon/x.c "  #  include \"tools/x.h\"")
_expect(spaced FALSE "daemon/ may not depend on tools/")
