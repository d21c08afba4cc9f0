/* The avx2 instance of the reduction kernels (see reduce_kern.inc). */
#define SHP_KERN_TABLE shp_reduce_kernels_avx2
#define SHP_KERN_NAME "avx2"
#include "reduce/reduce_kern.inc"
