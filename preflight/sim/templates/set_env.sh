#!/bin/bash
# Simulated ascend-toolkit set_env.sh (preflight sim). The real script is not public; this one
# exports what a sourced real one was observed to export (tests/fixtures/ascend/env_after_set_env_sh__*),
# pointing at directories that exist in this node's tree.
_ascend_home=@ASCEND_HOME@
export ASCEND_TOOLKIT_HOME=${_ascend_home}/ascend-toolkit/latest
export ASCEND_HOME_PATH=${ASCEND_TOOLKIT_HOME}
export ASCEND_OPP_PATH=${ASCEND_TOOLKIT_HOME}/opp
export ASCEND_AICPU_PATH=${ASCEND_TOOLKIT_HOME}
export TOOLCHAIN_HOME=${ASCEND_TOOLKIT_HOME}/toolkit
export LD_LIBRARY_PATH=${ASCEND_TOOLKIT_HOME}/tools/aml/lib64:${ASCEND_TOOLKIT_HOME}/tools/aml/lib64/plugin:${ASCEND_TOOLKIT_HOME}/lib64:${ASCEND_TOOLKIT_HOME}/lib64/plugin/opskernel:${ASCEND_TOOLKIT_HOME}/lib64/plugin/nnengine:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe/op_tiling:${_ascend_home}/driver/lib64/common:${_ascend_home}/driver/lib64/driver:${LD_LIBRARY_PATH}
export PYTHONPATH=${ASCEND_TOOLKIT_HOME}/python/site-packages:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe:${PYTHONPATH}
export PATH=${ASCEND_TOOLKIT_HOME}/bin:${ASCEND_TOOLKIT_HOME}/compiler/ccec_compiler/bin:${ASCEND_TOOLKIT_HOME}/tools/ccec_compiler/bin:${PATH}
unset _ascend_home
