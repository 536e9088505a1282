# Packaging test, run by ctest as `cmake -P` (see tests/package/CMakeLists.txt for the arguments).
#
#   1. installs the already-built lens into a fresh prefix: cmake --install <build> --prefix <tmp>,
#      and runs the installed `lens --version` when the command was installed
#   2. configures and builds tests/package/consumer with find_package(nemo_lens) and
#      -DCMAKE_PREFIX_PATH=<tmp>, using the build's generator and compiler, and runs it
#   3. compiles the same main.cpp with the compiler and the flags from
#      `pkg-config --cflags --libs nemo_lens` (PKG_CONFIG_PATH=<tmp>/<libdir>/pkgconfig) and runs it
#
# Each consumer's output must equal EXPECTED_OUTPUT_FILE exactly. Every failing step prints its
# command and its output. Run by hand:
#
#   cmake -DLENS_BUILD_DIR=build -DWORK_DIR=/tmp/pkg \
#         -DCONSUMER_SOURCE_DIR=tests/package/consumer \
#         -DEXPECTED_OUTPUT_FILE=build/tests/package/expected_output.txt -DGENERATOR=Ninja \
#         -DCXX_COMPILER=c++ -DPKG_CONFIG_EXECUTABLE=pkg-config \
#         -P tests/package/run_package_test.cmake
cmake_minimum_required(VERSION 3.20)

foreach(_required LENS_BUILD_DIR WORK_DIR CONSUMER_SOURCE_DIR EXPECTED_OUTPUT_FILE GENERATOR
                  CXX_COMPILER)
  if(NOT DEFINED ${_required} OR "${${_required}}" STREQUAL "")
    message(FATAL_ERROR "run_package_test.cmake: -D${_required}=... is required")
  endif()
endforeach()
if(NOT DEFINED LENS_LIBDIR OR LENS_LIBDIR STREQUAL "")
  set(LENS_LIBDIR lib)
endif()
if(NOT DEFINED LENS_SHARED)
  set(LENS_SHARED ON)
endif()

set(_prefix "${WORK_DIR}/prefix")
set(_consumer_build "${WORK_DIR}/consumer-build")
set(_pc_consumer "${WORK_DIR}/consumer-pkg-config")

# Runs a command; on failure prints the step, the command, its exit code and its output, and
# fails the test. On success leaves the trimmed stdout in the variable named by OUTPUT_VAR.
function(run_step step)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT_VAR" "COMMAND")
  execute_process(COMMAND ${arg_COMMAND}
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT _rc STREQUAL "0")
    list(JOIN arg_COMMAND " " _cmd)
    # NOTICE prints verbatim; FATAL_ERROR would re-wrap the output.
    message(NOTICE "command: ${_cmd}\n--- stdout ---\n${_out}\n--- stderr ---\n${_err}\n---")
    message(FATAL_ERROR "package test: step '${step}' failed (exit ${_rc}); its output is above")
  endif()
  message(STATUS "package test: ${step}: ok")
  if(arg_OUTPUT_VAR)
    string(STRIP "${_out}" _out)
    set(${arg_OUTPUT_VAR} "${_out}" PARENT_SCOPE)
  endif()
endfunction()

# Fails the test unless `actual` equals the expected output (line endings and a trailing newline
# aside); prints both.
file(READ "${EXPECTED_OUTPUT_FILE}" _expected)
string(REPLACE "\r\n" "\n" _expected "${_expected}")
string(STRIP "${_expected}" _expected)
function(check_output consumer actual)
  string(REPLACE "\r\n" "\n" actual "${actual}")
  if(NOT actual STREQUAL _expected)
    # Report the first line that differs, then both texts verbatim.
    string(REPLACE ";" "\\;" _exp_lines "${_expected}")
    string(REPLACE ";" "\\;" _act_lines "${actual}")
    string(REPLACE "\n" ";" _exp_lines "${_exp_lines}")
    string(REPLACE "\n" ";" _act_lines "${_act_lines}")
    list(LENGTH _exp_lines _n_exp)
    list(LENGTH _act_lines _n_act)
    set(_line 0)
    while(_line LESS _n_exp AND _line LESS _n_act)
      list(GET _exp_lines ${_line} _e)
      list(GET _act_lines ${_line} _a)
      if(NOT _e STREQUAL _a)
        break()
      endif()
      math(EXPR _line "${_line} + 1")
    endwhile()
    set(_e "<end of output>")
    set(_a "<end of output>")
    if(_line LESS _n_exp)
      list(GET _exp_lines ${_line} _e)
    endif()
    if(_line LESS _n_act)
      list(GET _act_lines ${_line} _a)
    endif()
    math(EXPR _line "${_line} + 1")
    message(NOTICE "--- expected (${EXPECTED_OUTPUT_FILE}) ---\n${_expected}\n"
                   "--- actual ---\n${actual}\n---\n"
                   "first difference, line ${_line}:\n  expected: ${_e}\n  actual:   ${_a}")
    message(FATAL_ERROR "package test: the ${consumer} consumer printed the wrong output")
  endif()
  message(STATUS "package test: ${consumer} consumer output: ok")
endfunction()

# Fails the test unless `path` is inside the scratch prefix: a consumer must not pick up another
# lens (e.g. one installed in /usr/local) or paths baked in at configure time.
function(check_in_prefix what path hint)
  file(REAL_PATH "${path}" _real)
  file(REAL_PATH "${_prefix}" _real_prefix)
  string(FIND "${_real}/" "${_real_prefix}/" _pos)
  if(NOT _pos EQUAL 0)
    message(FATAL_ERROR "package test: ${what} is '${path}', outside the install prefix "
                        "'${_prefix}'. ${hint}")
  endif()
endfunction()

# Neither a packager's DESTDIR nor the caller's pkg-config set-up may leak into the test.
unset(ENV{DESTDIR})
unset(ENV{PKG_CONFIG_SYSROOT_DIR})
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# ---- 1. install -------------------------------------------------------------------------------
set(_install_cmd "${CMAKE_COMMAND}" --install "${LENS_BUILD_DIR}" --prefix "${_prefix}")
if(LENS_BUILD_CONFIG)
  list(APPEND _install_cmd --config "${LENS_BUILD_CONFIG}")
endif()
run_step("install into ${_prefix}" COMMAND ${_install_cmd})
foreach(_file include/nemo/lens/lens.hpp ${LENS_LIBDIR}/cmake/nemo_lens/nemo_lensConfig.cmake
              ${LENS_LIBDIR}/cmake/nemo_lens/nemo_lensConfigVersion.cmake
              ${LENS_LIBDIR}/pkgconfig/nemo_lens.pc)
  if(NOT EXISTS "${_prefix}/${_file}")
    message(FATAL_ERROR "package test: the install did not produce ${_prefix}/${_file}")
  endif()
endforeach()

# The lens command, when installed, must find the installed library through its own RUNPATH.
if(EXISTS "${_prefix}/bin/lens")
  run_step("run the installed lens command" COMMAND "${_prefix}/bin/lens" --version
           OUTPUT_VAR _lens_version_out)
  string(FIND "${_lens_version_out}" "${LENS_VERSION}" _pos)
  if(_pos EQUAL -1)
    message(FATAL_ERROR "package test: 'lens --version' printed '${_lens_version_out}', "
                        "expected the version ${LENS_VERSION}")
  endif()
endif()

# The Python package, when installed, imports from <prefix>/<libdir>/python and finds the
# installed library through the extension's RUNPATH.
if(PYTHON_EXECUTABLE AND EXISTS "${_prefix}/${LENS_LIBDIR}/python/nemo_lens_cpp")
  set(ENV{PYTHONPATH} "${_prefix}/${LENS_LIBDIR}/python")
  run_step("import the installed Python package"
           COMMAND "${PYTHON_EXECUTABLE}" -c
                   "import nemo_lens_cpp as l; print(l._core.__file__); print(sorted(l.SpanGroup.resolve('default')))"
           OUTPUT_VAR _py_out)
  unset(ENV{PYTHONPATH})
  string(FIND "${_py_out}" "['checkpoint', 'evaluate', 'job']" _pos)
  if(_pos EQUAL -1)
    message(FATAL_ERROR "package test: the installed Python package printed '${_py_out}'")
  endif()
  string(REGEX MATCH "^[^\n]*" _py_module "${_py_out}")
  check_in_prefix("the imported nemo_lens_cpp._core" "${_py_module}"
                  "PYTHONPATH must select the installed package.")
endif()

# ---- 2. CMake consumer: find_package(nemo_lens) -----------------------------------------------
set(_configure_cmd "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${_consumer_build}"
    -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_PREFIX_PATH=${_prefix}"
    "-DLENS_REQUIRED_VERSION=${LENS_VERSION}"
    "-DCMAKE_BUILD_TYPE=${LENS_BUILD_CONFIG}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${CXX_FLAGS}"
    # Only the scratch prefix may provide nemo_lens: no user or system package registry.
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(MAKE_PROGRAM)
  list(APPEND _configure_cmd "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
run_step("configure the CMake consumer" COMMAND ${_configure_cmd})
file(STRINGS "${_consumer_build}/CMakeCache.txt" _lens_dir REGEX "^nemo_lens_DIR:")
string(REGEX REPLACE "^nemo_lens_DIR:[A-Z]+=" "" _lens_dir "${_lens_dir}")
check_in_prefix("the nemo_lens package found by find_package" "${_lens_dir}"
                "Another lens package was found first.")
set(_build_cmd "${CMAKE_COMMAND}" --build "${_consumer_build}")
if(LENS_BUILD_CONFIG)
  list(APPEND _build_cmd --config "${LENS_BUILD_CONFIG}")
endif()
run_step("build the CMake consumer" COMMAND ${_build_cmd})
if(EXISTS "${_consumer_build}/consumer")
  set(_consumer_exe "${_consumer_build}/consumer")
else()  # multi-config generators put it in a configuration directory
  file(GLOB _consumer_exe "${_consumer_build}/*/consumer")
endif()
run_step("run the CMake consumer" COMMAND "${_consumer_exe}" OUTPUT_VAR _cmake_out)
# The nemo::lens_mpi consumer, built when lens has the component.
if(EXISTS "${_consumer_build}/mpi_consumer")
  run_step("run the CMake consumer of nemo::lens_mpi" COMMAND "${_consumer_build}/mpi_consumer")
endif()
check_output("CMake" "${_cmake_out}")

# ---- 3. pkg-config consumer -------------------------------------------------------------------
if(NOT PKG_CONFIG_EXECUTABLE)
  message(STATUS "package test: SKIPPED the pkg-config consumer: pkg-config was not found")
  return()
endif()
set(ENV{PKG_CONFIG_PATH} "${_prefix}/${LENS_LIBDIR}/pkgconfig")
set(_pc "${PKG_CONFIG_EXECUTABLE}")
if(NOT LENS_SHARED)
  list(APPEND _pc --static)  # a static lens needs Libs.private (libcrypto) too
endif()
run_step("pkg-config --cflags" COMMAND ${_pc} --cflags nemo_lens OUTPUT_VAR _pc_cflags)
run_step("pkg-config --libs" COMMAND ${_pc} --libs nemo_lens OUTPUT_VAR _pc_libs)
run_step("pkg-config libdir" COMMAND ${_pc} --variable=libdir nemo_lens OUTPUT_VAR _pc_libdir)
run_step("pkg-config includedir" COMMAND ${_pc} --variable=includedir nemo_lens
         OUTPUT_VAR _pc_includedir)
message(STATUS "package test: pkg-config: --cflags ${_pc_cflags}; --libs ${_pc_libs}")
set(_pc_hint "nemo_lens.pc must not hard-code the configure-time CMAKE_INSTALL_PREFIX: an install "
    "with --prefix or DESTDIR, or a moved tree, needs prefix=\${pcfiledir}/<path back to the "
    "prefix>.")
string(CONCAT _pc_hint ${_pc_hint})
check_in_prefix("nemo_lens.pc's libdir" "${_pc_libdir}" "${_pc_hint}")
check_in_prefix("nemo_lens.pc's includedir" "${_pc_includedir}" "${_pc_hint}")

separate_arguments(_pc_cflags UNIX_COMMAND "${_pc_cflags}")
separate_arguments(_pc_libs UNIX_COMMAND "${_pc_libs}")
separate_arguments(_extra_flags UNIX_COMMAND "${CXX_FLAGS}")
run_step("build the pkg-config consumer"
         COMMAND "${CXX_COMPILER}" ${_extra_flags} ${_pc_cflags} -Wall -Wextra -Wpedantic -Werror
                 "${CONSUMER_SOURCE_DIR}/main.cpp" -o "${_pc_consumer}" ${_pc_libs}
                 "-Wl,-rpath,${_pc_libdir}")
run_step("run the pkg-config consumer" COMMAND "${_pc_consumer}" OUTPUT_VAR _pc_out)
check_output("pkg-config" "${_pc_out}")

message(STATUS "package test: passed")
