# Turn a text file into a C array (cmake -P, so no xxd is needed).
# -DIN=<file> -DOUT=<generated .c>
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from kernels/tma_copy.cu by cmake/embed_source.cmake. Do not edit. */\n#include <stddef.h>\n__attribute__((visibility(\"hidden\"))) extern const char p2pt__tma_copy_source[];\n__attribute__((visibility(\"hidden\"))) extern const size_t p2pt__tma_copy_source_len;\nconst char p2pt__tma_copy_source[] = {\n${bytes}0x00};\nconst size_t p2pt__tma_copy_source_len = ${len};\n")
