/*
 * Exact (order-independent) floating-point sums: the arithmetic.
 *
 * A floating-point value is an integer times a power of two, so the sum of
 * any multiset of finite values is an integer times 2^lo, where lo is the
 * lowest set bit's exponent among them.  Exact mode carries that integer on
 * the wire as 32-bit limbs, one int64 lane each, so that plain int64 SUM
 * (what the aggregation nodes already do, in any order, with any tree) adds
 * it exactly; the client then propagates the carries and rounds once, to
 * nearest-even.  The result is the correctly rounded exact sum, whatever the
 * tree, the order or the number of members (docs/reduction.md, "Exact
 * mode", has the proof).
 *
 * The window (which bits the limbs cover) is agreed first: every member
 * computes shp_exact_window() of its own values, the group reduces the
 * SHP_EXACT_WIN_LANES int64 lanes with MAX, and everyone derives the same
 * layout from the result (shp_exact_layout()).  shp_exact_window_full()
 * gives the window that covers every value of a type, for a single pass.
 *
 * Per element the lanes are: `limbs` limbs (bit k of limb j is bit
 * lo + 32j + k of the magnitude, each limb signed by its value's sign);
 * then, if the vector holds an infinity or a NaN, three counts (NaNs, +inf,
 * -inf); then, if it holds a -0, the count of contributions that are not
 * -0 (a zero sum is -0 only if every contribution was -0, as in IEEE 754).
 */
#ifndef SHP_COMMON_EXACT_H
#define SHP_COMMON_EXACT_H

#include "reduce/reduce.h"
#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

#define SHP_EXACT_LIMB_BITS 32
/* window lanes, reduced with int64 MAX: top bit, -(lowest bit), flags */
#define SHP_EXACT_WIN_LANES 3
#define SHP_EXACT_HAS_SPECIAL 1 /* an infinity or a NaN */
#define SHP_EXACT_HAS_NEGZERO 2 /* a -0 */
/* A lane one sender may put on the wire lies in [-2^52, 2^52 - 1]: its own
 * contributions' 32-bit limbs summed, at most 2^20 contributions, or an
 * AN's sum over at most 2^20 below it.  Anything else is refused (by the
 * AN, SHP_ERR_PROTO) as a malformed accumulator; so an AN's fold of fewer
 * than 2^11 children cannot overflow an int64 lane. */
#define SHP_EXACT_LANE_MAX (((int64_t)1 << 52) - 1)
/* most lanes per element: f64's full window (66 limbs) and 4 more */
#define SHP_EXACT_LANES_MAX 255

typedef struct shp_exact_layout {
    shp_dtype_t dtype;
    int32_t lo;     /* exponent of bit 0 of limb 0 */
    unsigned limbs; /* 0 if every value is zero, inf or NaN */
    unsigned lanes; /* per element: limbs + specials + negzero lane */
    int specials;   /* the three special counts follow the limbs */
    int negzero;    /* the not-(-0) count is the last lane */
} shp_exact_layout_t;

/* Is SUM of this type computed exactly?  f32, f64, f16, bf16. */
int shp_exact_dtype_ok(shp_dtype_t dt);

/* The window of nsrcs contributions of `count` elements each, to be
 * reduced with int64 MAX with everyone else's. */
SHP_WUR shp_status_t shp_exact_window(shp_dtype_t dt, const void *const *srcs,
                                      unsigned nsrcs, size_t count,
                                      int64_t win[SHP_EXACT_WIN_LANES]);
/* The window that holds every value of the type, with both special
 * kinds: no first pass needed. */
void shp_exact_window_full(shp_dtype_t dt, int64_t win[SHP_EXACT_WIN_LANES]);

/* The layout for an agreed (reduced) window.  SHP_ERR_PROTO with a reason
 * if the window is not one shp_exact_window() can produce for this type. */
SHP_WUR shp_status_t shp_exact_layout(shp_dtype_t dt,
                                      const int64_t win[SHP_EXACT_WIN_LANES],
                                      shp_exact_layout_t *lay,
                                      const char **why);

/* lanes[count x lay->lanes] = the exact sum of the nsrcs contributions, as
 * limbs.  SHP_ERR_INVALID_PARAM if a value lies outside the window (the
 * window was not agreed from these values). */
SHP_WUR shp_status_t shp_exact_encode(const shp_exact_layout_t *lay,
                                      const void *const *srcs, unsigned nsrcs,
                                      size_t count, int64_t *lanes);

/* out[count] = each element's lanes (summed over the group) rounded once
 * to nearest-even: the correctly rounded exact sum; +-inf when it
 * overflows; NaN (the default quiet NaN) if a contribution was NaN or both
 * infinities were added. */
void shp_exact_decode(const shp_exact_layout_t *lay, const int64_t *lanes,
                      size_t count, void *out);

/* Are all lanes within [-SHP_EXACT_LANE_MAX - 1, SHP_EXACT_LANE_MAX]?
 * (What an AN checks.) */
int shp_exact_lanes_ok(const void *lanes, size_t n); /* any alignment */

#endif
