/* The avx512 instance of the reduction kernels (see reduce_kern.inc). */
#define SHP_KERN_TABLE shp_reduce_kernels_avx512
#define SHP_KERN_NAME "avx512"
#include "reduce/reduce_kern.inc"
