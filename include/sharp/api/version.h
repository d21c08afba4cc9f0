/*
 * sharp: the level of the SHARP collective API this library implements.
 * Every macro is usable in #if.
 */
#ifndef SHARP_API_VERSION_H
#define SHARP_API_VERSION_H

#define SHARP_VERNO_MAJOR 3
#define SHARP_VERNO_MINOR 6
#define SHARP_MINOR_BIT 16
#define SHARP_MAJOR_BIT 24
#define SHARP_VERSION(major, minor)                                            \
    (((major) << SHARP_MAJOR_BIT) | ((minor) << SHARP_MINOR_BIT))
#define SHARP_API SHARP_VERSION(SHARP_VERNO_MAJOR, SHARP_VERNO_MINOR)

#endif
