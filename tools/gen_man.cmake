# Writes the man page kafka-mirrors.1 from `kafka-mirrors --help`, so the two never disagree.
#   cmake -DKM=path/to/kafka-mirrors -DVER=0.1.0 -DOUT=kafka-mirrors.1 -P gen_man.cmake
execute_process(COMMAND ${KM} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${KM} --help failed (${rc})")
endif()
# roff: backslashes are escapes; a line starting with '.' or "'" would be a request.
string(REPLACE "\\" "\\e" help "${help}")
string(REGEX REPLACE "\n([.'])" "\n\\\\&\\1" help "${help}")
file(WRITE ${OUT}
     ".TH KAFKA-MIRRORS 1 \"\" \"kmirror ${VER}\" \"User Commands\"\n"
     ".SH NAME\n"
     "kafka-mirrors \\- manage the KIP-1279 cluster mirrors of a Kafka-protocol cluster\n"
     ".SH SYNOPSIS\n"
     ".nf\n${help}.fi\n"
     ".SH SEE ALSO\n"
     "The full reference (output fields, JSON, messages, the recover contract): cli.md;\n"
     "per-mirror settings for \\-\\-mirror\\-config: config.md; both in /usr/share/doc/kmirror.\n")
