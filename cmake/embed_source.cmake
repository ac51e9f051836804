# SPDX-License-Identifier: Apache-2.0
# Turn a text file into a NUL-terminated C array and its length (cmake -P,
# so no xxd is needed).
# -DIN=<file> -DOUT=<generated .c> -DSYMBOL=<C name> -DLABEL=<name in the comment>
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
set(vis "__attribute__((visibility(\"hidden\")))")
file(WRITE "${OUT}" "/* Generated from ${LABEL} by cmake/embed_source.cmake. Do not edit. */\n#include <stddef.h>\n${vis} extern const char ${SYMBOL}[];\n${vis} extern const size_t ${SYMBOL}_len;\nconst char ${SYMBOL}[] = {\n${bytes}0x00};\nconst size_t ${SYMBOL}_len = ${len};\n")
