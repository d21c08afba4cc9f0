#include "core/time.h"

int shp_deadline_left_ms(uint64_t deadline_ns)
{
    uint64_t now, left;

    if (deadline_ns == UINT64_MAX) {
        return -1;
    }
    now = shp_time_ns();
    if (now >= deadline_ns) {
        return 0;
    }
    left = (deadline_ns - now + SHP_NSEC_PER_MSEC - 1) / SHP_NSEC_PER_MSEC;
    return left > INT32_MAX ? INT32_MAX : (int)left;
}
