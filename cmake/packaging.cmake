# Installation layout and CPack (.deb and .rpm). `cmake --build build --target package`.
include(GNUInstallDirs)

if(TARGET kmirror)
  install(TARGETS kmirror LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/kmirror COMPONENT runtime)
endif()
foreach(tool kbroker kafka-mirrors)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  endif()
endforeach()
install(FILES ${CMAKE_SOURCE_DIR}/hostapi/kbx.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kmirror
        COMPONENT runtime)
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/config.md
              ${CMAKE_SOURCE_DIR}/docs/cli.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime OPTIONAL)

set(CPACK_PACKAGE_NAME kmirror)
set(CPACK_PACKAGE_VENDOR "kmirror")
set(CPACK_PACKAGE_CONTACT "kmirror developers <dev@kmirror.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Offset-preserving cross-cluster replication for Kafka-protocol clusters (KIP-1279)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR "DEB;RPM")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
set(CPACK_RPM_PACKAGE_LICENSE "Apache-2.0")
set(CPACK_RPM_PACKAGE_AUTOREQ ON)
include(CPack)
