/* sharp: everything a client of the SHARP collective API needs. */
#ifndef SHARP_API_SHARP_H
#define SHARP_API_SHARP_H

#include <sharp/api/version.h>
#include <sharp/api/sharp_coll.h>

#endif
