# docs/configuration.md is the one source of the configuration variables:
# this turns its tables into the text `uiwarp-run --help` prints and into
# the man page uiwarp(7) (docs/man/uiwarp.7.md's @CONFIGURATION@), so
# neither can drift from it (test docs_man checks the result).
#
# uiw_config_help(MD OUT_VAR): OUT_VAR = "  NAME (default D)\n      MEANING"
#   lines, wrapped at 79 columns, one entry per table row.
# uiw_config_markdown(MD OUT_VAR): OUT_VAR = the document without its title,
#   each table as a list "- `NAME` (default D; read by R): MEANING".

# The lines of md as a list; ";" stands as "<SC>" (CMake's list separator).
function(_uiw_lines md out)
  file(READ ${md} all)
  string(REPLACE ";" "<SC>" all "${all}")
  string(REPLACE "[" "<LB>" all "${all}")
  string(REPLACE "]" "<RB>" all "${all}")
  string(REPLACE "\n" ";" all "${all}")
  set(${out} "${all}" PARENT_SCOPE)
endfunction()

function(_uiw_unescape var)
  string(REPLACE "<SC>" ";" v "${${var}}")
  string(REPLACE "<LB>" "[" v "${v}")
  string(REPLACE "<RB>" "]" v "${v}")
  set(${var} "${v}" PARENT_SCOPE)
endfunction()

function(_uiw_config_rows md out)
  _uiw_lines(${md} lines)
  set(rows)
  foreach(l IN LISTS lines)
    # | `NAME` | default | [read by |] meaning |
    if(l MATCHES "^\\| `(UIWARP_[A-Z0-9_]+)` \\| ([^|]*) \\| ([^|]*) \\| ([^|]*) \\|$")
      list(APPEND rows "${CMAKE_MATCH_1}\t${CMAKE_MATCH_2}\t${CMAKE_MATCH_3}\t${CMAKE_MATCH_4}")
    elseif(l MATCHES "^\\| `(UIWARP_[A-Z0-9_]+)` \\| ([^|]*) \\| ([^|]*) \\|$")
      list(APPEND rows "${CMAKE_MATCH_1}\t${CMAKE_MATCH_2}\t\t${CMAKE_MATCH_3}")
    endif()
  endforeach()
  set(${out} "${rows}" PARENT_SCOPE)
endfunction()

function(uiw_config_help md out)
  _uiw_config_rows(${md} rows)
  set(text "")
  foreach(r IN LISTS rows)
    string(REPLACE "\t" ";" f "${r}")
    list(GET f 0 name)
    list(GET f 1 def)
    list(GET f 3 meaning)
    string(REPLACE "`" "" def "${def}")
    string(REPLACE "`" "" meaning "${meaning}")
    string(APPEND text "  ${name} (default ${def})\n")
    string(REPLACE " " ";" words "${meaning}")
    set(line "     ")
    foreach(w IN LISTS words)
      string(LENGTH "${line} ${w}" n)
      if(n GREATER 79)
        string(APPEND text "${line}\n")
        set(line "     ")
      endif()
      string(APPEND line " ${w}")
    endforeach()
    string(APPEND text "${line}\n")
  endforeach()
  _uiw_unescape(text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(uiw_config_markdown md out)
  _uiw_lines(${md} lines)
  set(text "")
  foreach(l IN LISTS lines)
    if(l MATCHES "^# ")
      continue() # the title: the man page has its own
    elseif(l MATCHES "^\\| `(UIWARP_[A-Z0-9_]+)` \\| ([^|]*) \\| ([^|]*) \\| ([^|]*) \\|$")
      string(APPEND text "- `${CMAKE_MATCH_1}` (default ${CMAKE_MATCH_2}; read by ${CMAKE_MATCH_3}): ${CMAKE_MATCH_4}\n")
    elseif(l MATCHES "^\\| `(UIWARP_[A-Z0-9_]+)` \\| ([^|]*) \\| ([^|]*) \\|$")
      string(APPEND text "- `${CMAKE_MATCH_1}` (default ${CMAKE_MATCH_2}): ${CMAKE_MATCH_3}\n")
    elseif(l MATCHES "^\\|")
      continue() # a table's head and rule
    elseif(l MATCHES "^## (.*)")
      string(TOUPPER "${CMAKE_MATCH_1}" h)
      string(APPEND text "# ${h}\n")
    else()
      string(APPEND text "${l}\n")
    endif()
  endforeach()
  _uiw_unescape(text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
