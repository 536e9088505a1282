# `lens collect`'s transcoding (tools/lens/otlp_transcode.cpp), checked against libprotobuf's
# classes generated from tests/proto and against the library's OTLP/JSON writer, compiled here
# because the exporters are internal to the library. Included from tests/CMakeLists.txt after
# add_subdirectory(proto).
if(TARGET lens_otlp_proto)
  find_package(nlohmann_json 3 REQUIRED)
  lens_unit_test(otlp_transcode_test
    otlp_transcode_test.cpp
    ${PROJECT_SOURCE_DIR}/tools/lens/otlp_transcode.cpp
    ${PROJECT_SOURCE_DIR}/src/export/otlp_json.cpp)
  target_include_directories(otlp_transcode_test PRIVATE ${PROJECT_SOURCE_DIR}/tools/lens)
  target_link_libraries(otlp_transcode_test PRIVATE
    lens_otlp_proto nlohmann_json::nlohmann_json GTest::gmock)
endif()
