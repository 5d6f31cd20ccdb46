# Writes OUTPUT (a header) with SMLA_COMPILER_COMMIT, the commit of the
# source tree smla-compile is built from (`git describe --always --dirty`),
# which smla-compile records in every manifest it writes. Run at every
# build (cmake -DSOURCE_DIR=... -DOUTPUT=... -P CompilerVersion.cmake); the
# header is rewritten only when the commit changes.
execute_process(
  COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#define SMLA_COMPILER_COMMIT \"${commit}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
