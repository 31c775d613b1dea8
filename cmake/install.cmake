# Install rules (`cmake --install BUILD --prefix PREFIX`, debian/rules):
#
#   LIBDIR/libuiwarp.so.0            the engine (soname libuiwarp.so.0)
#   LIBDIR/libuiwarp.so              for linking (-luiwarp)
#   INCLUDEDIR/uiwarp/rdmap.h        the engine API
#   LIBDIR/pkgconfig/uiwarp.pc       pkg-config --cflags --libs uiwarp
#   LIBDIR/cmake/uiwarp/             find_package(uiwarp): uiwarp::uiwarp
#   LIBDIR/uiwarp/                   the drop-in libibverbs.so.1, librdmacm.so.1,
#                                    libmlx5.so.1, libefa.so.1: a private directory,
#                                    so an install never shadows the system's rdma-core
#   LIBEXECDIR/uiwarp/uiwarp-sysfs   for uiwarp-run --sysfs
#   BINDIR/uiwarp-run                finds LIBDIR/uiwarp relative to itself
#   BINDIR/uiwarp-replicate          RUNPATH $ORIGIN/<BINDIR to LIBDIR/uiwarp>
#   BINDIR/uiwarp-stat
#   MANDIR/man1, man7                uiwarp-run.1 uiwarp-replicate.1 uiwarp-stat.1 uiwarp.7
#   DOCDIR                           README.md, docs/*.md
#
# RUNPATHs are relative ($ORIGIN), so a prefix can be moved; where LIBDIR is
# one of the linker's default directories the shim libraries find
# libuiwarp.so.0 without one (UIWARP_INSTALL_RUNPATH=OFF, as debian/rules).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(UIW_INSTALL_SHIMDIR ${CMAKE_INSTALL_LIBDIR}/uiwarp)
set(UIW_INSTALL_LIBEXEC ${CMAKE_INSTALL_LIBEXECDIR}/uiwarp)
option(UIWARP_INSTALL_RUNPATH "Installed shim libraries find libuiwarp.so.0 through \$ORIGIN/.." ON)

# where things are relative to each other once installed
file(RELATIVE_PATH UIW_REL_BIN_SHIM ${CMAKE_INSTALL_FULL_BINDIR}
  ${CMAKE_INSTALL_FULL_LIBDIR}/uiwarp)
file(RELATIVE_PATH UIW_REL_BIN_LIBEXEC ${CMAKE_INSTALL_FULL_BINDIR}
  ${CMAKE_INSTALL_FULL_LIBEXECDIR}/uiwarp)
file(RELATIVE_PATH UIW_REL_SHIM_LIB ${CMAKE_INSTALL_FULL_LIBDIR}/uiwarp ${CMAKE_INSTALL_FULL_LIBDIR})
file(RELATIVE_PATH UIW_REL_LIBEXEC_SHIM ${CMAKE_INSTALL_FULL_LIBEXECDIR}/uiwarp
  ${CMAKE_INSTALL_FULL_LIBDIR}/uiwarp)

# the engine
target_include_directories(uiwarp INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
install(TARGETS uiwarp EXPORT uiwarpTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(FILES ${CMAKE_SOURCE_DIR}/rdmap/rdmap.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/uiwarp
  COMPONENT dev)
install(EXPORT uiwarpTargets NAMESPACE uiwarp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/uiwarp
  COMPONENT dev)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/uiwarpConfig.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/uiwarpConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/uiwarp
  PATH_VARS UIW_INSTALL_SHIMDIR CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/uiwarpConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/uiwarpConfig.cmake
  ${CMAKE_BINARY_DIR}/cmake/uiwarpConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/uiwarp COMPONENT dev)
# relocatable: the prefix is found from the .pc file's own place (OFF for
# a distribution package, whose prefix is fixed: prefix=/usr, and
# pkg-config then leaves out the system's -L and -I)
option(UIWARP_PC_RELOCATABLE "uiwarp.pc finds its prefix through \${pcfiledir}" ON)
if(UIWARP_PC_RELOCATABLE)
  file(RELATIVE_PATH _rel ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
  string(REGEX REPLACE "/$" "" _rel "${_rel}")
  set(UIW_PC_PREFIX "\${pcfiledir}/${_rel}")
else()
  set(UIW_PC_PREFIX ${CMAKE_INSTALL_PREFIX})
endif()
if(IS_ABSOLUTE ${CMAKE_INSTALL_LIBDIR})
  set(UIW_PC_LIBDIR ${CMAKE_INSTALL_LIBDIR})
else()
  set(UIW_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE ${CMAKE_INSTALL_INCLUDEDIR})
  set(UIW_PC_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
else()
  set(UIW_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/uiwarp.pc.in ${CMAKE_BINARY_DIR}/cmake/uiwarp.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cmake/uiwarp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)

# the drop-in shim libraries, in their private directory (no -dev symlinks:
# nothing links against them by name but uiwarp-replicate, at build time)
set(_shim_rpath "\$ORIGIN")
if(UIWARP_INSTALL_RUNPATH)
  set(_shim_rpath "\$ORIGIN:\$ORIGIN/${UIW_REL_SHIM_LIB}")
endif()
foreach(t ibverbs rdmacm mlx5 efa)
  set_target_properties(${t} PROPERTIES INSTALL_RPATH "${_shim_rpath}")
  target_link_options(${t} PRIVATE -Wl,--enable-new-dtags)
  install(TARGETS ${t} LIBRARY DESTINATION ${UIW_INSTALL_SHIMDIR} NAMELINK_SKIP COMPONENT runtime)
endforeach()

# programs
set_target_properties(uiwarp-replicate PROPERTIES INSTALL_RPATH "\$ORIGIN/${UIW_REL_BIN_SHIM}")
set_target_properties(uiwarp-sysfs PROPERTIES INSTALL_RPATH "\$ORIGIN/${UIW_REL_LIBEXEC_SHIM}")
target_link_options(uiwarp-sysfs PRIVATE -Wl,--enable-new-dtags)
install(TARGETS uiwarp-replicate uiwarp-stat RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT runtime)
install(TARGETS uiwarp-sysfs RUNTIME DESTINATION ${UIW_INSTALL_LIBEXEC} COMPONENT runtime)
install(PROGRAMS ${CMAKE_BINARY_DIR}/install/uiwarp-run DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT runtime)

# documentation
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT runtime FILES_MATCHING PATTERN "*.md" PATTERN "man" EXCLUDE)
