#!/bin/sh
# ir-generic.sh IN.ll OUT.ll: clang's NVPTX IR made fit for any linker's module (MORI-IR,
# mk/ir.mk): the target-cpu/target-features attributes go (the consumer codegens for its
# own target), and so does the module flag nvvm-reflect-ftz, which clang sets (Override
# behaviour) to its own denormal mode: a consumer that sets another value (Triton sets 1) would
# fail to link ("conflicting override values"). Nothing here calls __nvvm_reflect.
set -eu
id=$(sed -n 's/^!\([0-9]*\) = !{i32 [0-9]*, !"nvvm-reflect-ftz", i32 [0-9]*}$/\1/p' "$1")
sed -e 's/ "target-cpu"="[^"]*"//' -e 's/ "target-features"="[^"]*"//' \
	${id:+-e "/^!llvm.module.flags = /{s/!$id, //;s/, !$id}/}/;s/{!$id}/{}/}"} "$1" > "$2"
if grep -q '__nvvm_reflect' "$2"; then
	echo "ir-generic.sh: $1 calls __nvvm_reflect: its denormal mode cannot be left to the consumer" >&2
	exit 1
fi
