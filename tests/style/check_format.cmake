# Fails when a C++ file of the project differs from what .clang-format asks for.
# Run by ctest (style.clang_format); prints the files to fix and the command that fixes them.
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
  ${SOURCE_DIR}/include/*.hpp ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.hpp
  ${SOURCE_DIR}/tools/*.cpp ${SOURCE_DIR}/tools/*.hpp ${SOURCE_DIR}/examples/*.cpp
  ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.hpp ${SOURCE_DIR}/bench/*.cpp ${SOURCE_DIR}/bench/*.hpp
  ${SOURCE_DIR}/fuzz/*.cpp)
set(bad "")
foreach(f ${files})
  execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror ${f}
    WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    list(APPEND bad ${f})
  endif()
endforeach()
if(bad)
  string(REPLACE ";" " " bad_files "${bad}")
  message(FATAL_ERROR "not formatted: ${bad_files}\nfix with: clang-format -i ${bad_files}")
endif()
list(LENGTH files n)
message(STATUS "${n} files formatted as .clang-format asks")
