/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ctypes package (python/p2pt/) and the PyTorch MoE example: the
 * module loads libp2pt.so and turns a failed init into p2pt.Error with
 * p2pt's status and text (any machine with python3); on a GPU machine with
 * PyTorch, examples/moe_dispatch.py routes, dispatches through one
 * device-descriptor batch captured in a CUDA graph, and matches torch's own
 * dispatch byte for byte on every replay (and with half the experts on a
 * second GPU when there is one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "run_test.h"

static void require_python(void)
{
    char out[256];
    if (P2PT_SANITIZED)
        cr_skip_test("needs a build without AddressSanitizer: python3 cannot load this "
                     "libp2pt.so without preloading the ASan runtime");
    if (run_cmd("python3 -c 'import ctypes' 2>&1", out, sizeof(out)) != 0)
        cr_skip_test("no python3: none on the PATH");
}

Test(python, the_module_raises_p2pt_errors_with_status_and_text)
{
    require_python();
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof(cmd),
             "P2PT_LIBRARY='%s' P2P_CUDA_LIBRARY=/nonexistent/libcuda.so.1 python3 -c \""
             "import sys; sys.path.insert(0, '%s/python'); import p2pt\n"
             "try:\n    p2pt.Handle(transport='tma')\n"
             "except p2pt.Error as e:\n    print('status', e.status, e.text)\n"
             "try:\n    p2pt.Handle(transport='bogus')\n"
             "except p2pt.Error as e:\n    print('status', e.status, e.text)\n"
             "print('workspace', p2pt.workspace_bytes(10))\" 2>&1",
             P2PT_SO_PATH, P2PT_SOURCE_DIR);
    cr_assert_eq(run_cmd(cmd, out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "status 7 ") != NULL && strstr(out, "/nonexistent/libcuda.so.1") != NULL,
              "no driver: %s", out);
    cr_assert(strstr(out, "status 4 ") != NULL && strstr(out, "bogus") != NULL, "bad transport: %s",
              out);
    cr_assert(strstr(out, "workspace 64") != NULL, "%s", out);
}

static void moe(const char *extra)
{
    gt_require_gpus(1);
    require_python();
    char out[8192], cmd[2048];
    if (run_cmd("python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>&1",
            out, sizeof(out)) != 0)
        cr_skip_test("no PyTorch with CUDA: python3 cannot import one");
    snprintf(cmd, sizeof(cmd),
             "P2PT_LIBRARY='%s' P2P_TRANSPORT_CACHE_DIR=off python3 '%s/examples/moe_dispatch.py' "
             "--tokens 1024 --replays 6 %s 2>&1",
             P2PT_SO_PATH, P2PT_SOURCE_DIR, extra);
    int st = run_cmd(cmd, out, sizeof(out));
    cr_assert_eq(st, 0, "moe_dispatch.py exited %d:\n%s", st, out);
    cr_assert(strstr(out, "byte-exact") != NULL, "%s", out);
    cr_log_info("%s", out);
}

Test(python, moe_dispatch_matches_torch_on_every_replay)
{
    moe("");
}

Test(python, moe_dispatch_with_half_the_experts_on_a_peer)
{
    gt_require_gpus(2);
    moe("--peer");
}
