/*
 * The unwinder entry points std refers to, as hidden stubs linked into
 * libmm_malloc.so only (build.rs, a cdylib link argument): with them the
 * library needs no libgcc_s.so.1, which every process then mapped and
 * relocated for nothing (84 KiB of its RSS; a C program never unwinds
 * through this library, whose panics abort). Hidden: they bind this
 * library's own references only and never interpose the program's
 * unwinder. Not in libmm_malloc.a, whose program brings its own.
 *
 * What they do: a panic prints its message, then _Unwind_RaiseException
 * reports _URC_END_OF_STACK and std aborts ("failed to initiate panic"),
 * as it did at the extern "C" boundary; a backtrace has no frames; the
 * others are reached only while unwinding, which never starts.
 */
#define HIDDEN __attribute__((visibility("hidden")))

typedef unsigned long unwind_word;
struct _Unwind_Context;
struct _Unwind_Exception;

enum { URC_END_OF_STACK = 5 };

HIDDEN int _Unwind_RaiseException(struct _Unwind_Exception *e) {
    (void)e;
    return URC_END_OF_STACK;
}

HIDDEN void _Unwind_Resume(struct _Unwind_Exception *e) {
    (void)e;
    __builtin_trap();
}

HIDDEN int _Unwind_Backtrace(void *trace, void *arg) {
    (void)trace;
    (void)arg;
    return URC_END_OF_STACK;
}

HIDDEN unwind_word _Unwind_GetIP(struct _Unwind_Context *c) {
    (void)c;
    return 0;
}

HIDDEN unwind_word _Unwind_GetIPInfo(struct _Unwind_Context *c, int *before) {
    (void)c;
    *before = 0;
    return 0;
}

HIDDEN void *_Unwind_GetLanguageSpecificData(struct _Unwind_Context *c) {
    (void)c;
    return 0;
}

HIDDEN unwind_word _Unwind_GetRegionStart(struct _Unwind_Context *c) {
    (void)c;
    return 0;
}

HIDDEN unwind_word _Unwind_GetDataRelBase(struct _Unwind_Context *c) {
    (void)c;
    return 0;
}

HIDDEN unwind_word _Unwind_GetTextRelBase(struct _Unwind_Context *c) {
    (void)c;
    return 0;
}

HIDDEN void _Unwind_SetGR(struct _Unwind_Context *c, int i, unwind_word v) {
    (void)c;
    (void)i;
    (void)v;
}

HIDDEN void _Unwind_SetIP(struct _Unwind_Context *c, unwind_word v) {
    (void)c;
    (void)v;
}
