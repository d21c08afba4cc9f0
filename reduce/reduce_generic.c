/* The generic instance of the reduction kernels (see reduce_kern.inc). */
#define SHP_KERN_TABLE shp_reduce_kernels_generic
#define SHP_KERN_NAME "generic"
#include "reduce/reduce_kern.inc"
