/* Always-on checks of invariants the code itself owns (knot-resolver's kr_require): reference
 * and handle counts, ring indices morid computes, states a transition table allows. A broken
 * one means memory is already wrong: say where (file:line, the condition, a message) on stderr,
 * which is the journal under systemd, and abort so the core dump shows how it came to be.
 * Never for input from a client, a peer or a file: those are errors returned, never aborts. */
#ifndef MORI_INVARIANT_H
#define MORI_INVARIANT_H
#include <stdio.h>
#include <stdlib.h>

#define MORI_REQUIRE(cond, ...)                                                                  \
	do {                                                                                     \
		if (__builtin_expect(!(cond), 0)) {                                              \
			fprintf(stderr, "%s:%d: invariant '%s' broken: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                            \
			fputc('\n', stderr);                                                     \
			fflush(stderr);                                                          \
			abort();                                                                 \
		}                                                                                \
	} while (0)
#endif
