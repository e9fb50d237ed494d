# ctest helper: the committed docs/config.md must equal what km-config-doc prints (GEN).
execute_process(COMMAND ${GEN} -o ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "km-config-doc failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DOC} ${OUT} RESULT_VARIABLE diff)
if(NOT diff EQUAL 0)
  message(FATAL_ERROR "${DOC} is out of date with the config tables; run "
                      "`cmake --build <build-dir> --target config-doc` and commit it")
endif()
