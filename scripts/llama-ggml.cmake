# Included by CMake at the end of ggml's `project()` (CMAKE_PROJECT_ggml_INCLUDE, set by
# scripts/setup.sh): ggml, where llama-server spends its time computing, keeps the Release
# flags; what the rest of the build compiles at -O1 (HTTP, JSON, chat templates, argument
# parsing, graph building) is most of its compile time and none of its compute.
set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")
