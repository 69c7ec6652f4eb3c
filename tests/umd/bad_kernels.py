"""Kernels the compiler must refuse (line numbers are checked by the tests)."""
import umd
import umd.intrinsics as gpu
from umd.types import Ptr, f32, i32


def list_comp(x: Ptr[f32]):
    i = gpu.thread_idx.x
    y = [i for i in range(3)]                       # LINE list_comp


def unknown_call(x: Ptr[f32]):
    i = gpu.thread_idx.x
    x[i] = frobnicate(i)                            # LINE unknown_call  # noqa: F821


def float_index(x: Ptr[f32]):
    i = gpu.thread_idx.x
    x[i * 0.5] = 1.0                                # LINE float_index


def returns_value(x: Ptr[f32]):
    return 1                                        # LINE returns_value


def not_range(x: Ptr[f32], n: i32):
    for j, v in enumerate(range(n)):                # LINE not_range
        pass


def no_annotation(x, n: i32):                       # LINE no_annotation
    pass


def string_const(x: Ptr[f32]):
    s = "hello"                                     # LINE string_const


def with_stmt(x: Ptr[f32]):
    with open("f"):                                 # LINE with_stmt
        pass


def shared_cas(x: Ptr[i32]):
    s = gpu.shared_array(f32, 4)
    gpu.atomic_cas(s, 0, 1.0, 2.0)                  # LINE shared_cas


def misspelt_umd_name(x: f32[:]):
    i = umd.grid(1)
    umd.syncthread()                                # LINE misspelt_umd_name


def misspelt_attribute(x: f32[:]):
    i = gpu.thread_id.x                             # LINE misspelt_attribute


def misspelt_builtin(x: f32[:]):
    for k in rnage(4):                              # LINE misspelt_builtin  # noqa: F821
        x[k] = 0.0


def flat_ptr_2d_index(x: Ptr[f32]):
    x[1, 2] = 0.0                                   # LINE flat_ptr_2d_index


def row_of_2d(x: f32[:, :]):
    x[1] = 0.0                                      # LINE row_of_2d


def constant_zero_step(x: f32[:]):
    for k in range(0, 8, 0):                        # LINE constant_zero_step
        x[k] = 0.0


def grid_4(x: f32[:]):
    i = umd.grid(4)                                 # LINE grid_4


def unpack_mismatch(x: f32[:]):
    a, b, c = umd.grid(2)                           # LINE unpack_mismatch


def plain_python_call(x: f32[:]):
    x[0] = _helper(1.0)                             # LINE plain_python_call


def _helper(v):
    return v


def pressure(x: Ptr[f32]):
    i = gpu.thread_idx.x
    a0 = x[i + 0]
    a1 = x[i + 1]
    a2 = x[i + 2]
    a3 = x[i + 3]
    a4 = x[i + 4]
    a5 = x[i + 5]
    a6 = x[i + 6]
    a7 = x[i + 7]
    a8 = x[i + 8]
    a9 = x[i + 9]
    a10 = x[i + 10]
    a11 = x[i + 11]
    a12 = x[i + 12]
    a13 = x[i + 13]
    a14 = x[i + 14]
    a15 = x[i + 15]
    a16 = x[i + 16]
    a17 = x[i + 17]
    a18 = x[i + 18]
    a19 = x[i + 19]
    a20 = x[i + 20]
    a21 = x[i + 21]
    a22 = x[i + 22]
    a23 = x[i + 23]
    a24 = x[i + 24]
    a25 = x[i + 25]
    a26 = x[i + 26]
    a27 = x[i + 27]
    a28 = x[i + 28]
    a29 = x[i + 29]
    a30 = x[i + 30]
    a31 = x[i + 31]
    a32 = x[i + 32]
    a33 = x[i + 33]
    a34 = x[i + 34]
    a35 = x[i + 35]
    a36 = x[i + 36]
    a37 = x[i + 37]
    a38 = x[i + 38]
    a39 = x[i + 39]
    a40 = x[i + 40]
    a41 = x[i + 41]
    a42 = x[i + 42]
    a43 = x[i + 43]
    a44 = x[i + 44]
    a45 = x[i + 45]
    a46 = x[i + 46]
    a47 = x[i + 47]
    a48 = x[i + 48]
    a49 = x[i + 49]
    a50 = x[i + 50]
    a51 = x[i + 51]
    a52 = x[i + 52]
    a53 = x[i + 53]
    a54 = x[i + 54]
    a55 = x[i + 55]
    a56 = x[i + 56]
    a57 = x[i + 57]
    a58 = x[i + 58]
    a59 = x[i + 59]
    a60 = x[i + 60]
    a61 = x[i + 61]
    a62 = x[i + 62]
    a63 = x[i + 63]
    a64 = x[i + 64]
    a65 = x[i + 65]
    a66 = x[i + 66]
    a67 = x[i + 67]
    a68 = x[i + 68]
    a69 = x[i + 69]
    a70 = x[i + 70]
    a71 = x[i + 71]
    a72 = x[i + 72]
    a73 = x[i + 73]
    a74 = x[i + 74]
    a75 = x[i + 75]
    a76 = x[i + 76]
    a77 = x[i + 77]
    a78 = x[i + 78]
    a79 = x[i + 79]
    a80 = x[i + 80]
    a81 = x[i + 81]
    a82 = x[i + 82]
    a83 = x[i + 83]
    a84 = x[i + 84]
    a85 = x[i + 85]
    a86 = x[i + 86]
    a87 = x[i + 87]
    a88 = x[i + 88]
    a89 = x[i + 89]
    a90 = x[i + 90]
    a91 = x[i + 91]
    a92 = x[i + 92]
    a93 = x[i + 93]
    a94 = x[i + 94]
    a95 = x[i + 95]
    a96 = x[i + 96]
    a97 = x[i + 97]
    a98 = x[i + 98]
    a99 = x[i + 99]
    a100 = x[i + 100]
    a101 = x[i + 101]
    a102 = x[i + 102]
    a103 = x[i + 103]
    a104 = x[i + 104]
    a105 = x[i + 105]
    a106 = x[i + 106]
    a107 = x[i + 107]
    a108 = x[i + 108]
    a109 = x[i + 109]
    a110 = x[i + 110]
    a111 = x[i + 111]
    a112 = x[i + 112]
    a113 = x[i + 113]
    a114 = x[i + 114]
    a115 = x[i + 115]
    a116 = x[i + 116]
    a117 = x[i + 117]
    a118 = x[i + 118]
    a119 = x[i + 119]
    a120 = x[i + 120]
    a121 = x[i + 121]
    a122 = x[i + 122]
    a123 = x[i + 123]
    a124 = x[i + 124]
    a125 = x[i + 125]
    a126 = x[i + 126]
    a127 = x[i + 127]
    a128 = x[i + 128]
    a129 = x[i + 129]
    x[i] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 + a12 + a13 + a14 + a15 + a16 + a17 + a18 + a19 + a20 + a21 + a22 + a23 + a24 + a25 + a26 + a27 + a28 + a29 + a30 + a31 + a32 + a33 + a34 + a35 + a36 + a37 + a38 + a39 + a40 + a41 + a42 + a43 + a44 + a45 + a46 + a47 + a48 + a49 + a50 + a51 + a52 + a53 + a54 + a55 + a56 + a57 + a58 + a59 + a60 + a61 + a62 + a63 + a64 + a65 + a66 + a67 + a68 + a69 + a70 + a71 + a72 + a73 + a74 + a75 + a76 + a77 + a78 + a79 + a80 + a81 + a82 + a83 + a84 + a85 + a86 + a87 + a88 + a89 + a90 + a91 + a92 + a93 + a94 + a95 + a96 + a97 + a98 + a99 + a100 + a101 + a102 + a103 + a104 + a105 + a106 + a107 + a108 + a109 + a110 + a111 + a112 + a113 + a114 + a115 + a116 + a117 + a118 + a119 + a120 + a121 + a122 + a123 + a124 + a125 + a126 + a127 + a128 + a129
