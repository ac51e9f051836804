/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host time to enqueue one TMA batch of 14 KiB pieces (128, 256, 1024),
 * next to one single copy, with validation off, on with every piece inside
 * registered windows (a range check per piece), and on without windows (a
 * driver query per piece side). Medians of 41, the stream idle before each.
 * Built against the library's static archive by run.sh enqueue.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "p2pt_internal.h"
#include "test_driver.h"
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int cmpd(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return (x>y)-(x<y);}
#define REPS 41
static double med(double *v){qsort(v,REPS,sizeof(double),cmpd);return v[REPS/2];}
int main(void){
  if (p2pt_test_driver_load(NULL)) { puts(p2pt__last_error_text()); return 1; }
  CUdevice dv; CUcontext c; tcu.cuDeviceGet(&dv,0); tcu.cuDevicePrimaryCtxRetain(&c,dv); tcu.cuCtxSetCurrent(c);
  const char *opts[3] = {"P2P_TRANSPORT_VALIDATE=0", "P2P_TRANSPORT_VALIDATE=1", "P2P_TRANSPORT_VALIDATE=1"};
  const char *what[3] = {"validation off", "validation on, pieces in windows", "validation on, no windows"};
  CUdeviceptr s,d; tcu.cuMemAlloc(&s,64<<20); tcu.cuMemAlloc(&d,64<<20); CUstream st; tcu.cuStreamCreate(&st,1);
  static p2pt_copy_desc D[1344];
  for (int i=0;i<1344;i++){D[i].dst=(void*)(uintptr_t)(d+i*20480ull); D[i].src=(void*)(uintptr_t)(s+i*14336ull); D[i].bytes=14336;}
  int ns[] = {128, 256, 1024};
  for (int v = 0; v < 3; v++) {
    p2pt_init_args a={sizeof(a),NULL,"tma",opts[v]}; p2pt_handle *h;
    if (p2pt_init(&a,&h)||p2pt_prepare(h,0)) { puts(p2pt_last_error(NULL)); return 1; }
    if (v == 1) { p2pt_window_register(h,0,(void*)(uintptr_t)s,64<<20); p2pt_window_register(h,0,(void*)(uintptr_t)d,64<<20); }
    for (int k=0;k<3;k++){ int n=ns[k]; double tb[REPS], tl[REPS];
      for (int r=0;r<REPS;r++){
        tcu.cuStreamSynchronize(st); double t0=now(); if (p2pt_copy_batch_async(h,D,n,st)) { puts(p2pt_last_error(NULL)); return 1; } tb[r]=now()-t0;
        tcu.cuStreamSynchronize(st); t0=now(); p2pt_copy_async(h,(void*)(uintptr_t)d,(void*)(uintptr_t)s,14336,st); tl[r]=now()-t0; }
      printf("%-34s n=%4d: batch enqueue %.2f us; one single copy %.2f us\n", what[v], n, med(tb), med(tl)); }
    p2pt_finalize(h);
  }
  return 0;
}
