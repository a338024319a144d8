package cu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
)

// CUBLAS is the loaded cuBLAS library. Handles are made per Context with
// Context.NewBLAS.
type CUBLAS struct {
	s                   blasSyms
	path                string
	major, minor, patch int
}

type blasSyms struct {
	create, destroy, setStream, setWorkspace, setMathMode, getProperty, gemmEx,
	gemmBatched, statusName, statusString uintptr
}

func (s *blasSyms) specs() []symSpec {
	return []symSpec{
		sym(&s.create, "cublasCreate_v2"),
		sym(&s.destroy, "cublasDestroy_v2"),
		sym(&s.setStream, "cublasSetStream_v2"),
		sym(&s.setWorkspace, "cublasSetWorkspace_v2"),
		sym(&s.setMathMode, "cublasSetMathMode"),
		sym(&s.getProperty, "cublasGetProperty"),
		sym(&s.gemmEx, "cublasGemmEx"),
		optSym(&s.gemmBatched, "cublasGemmStridedBatchedEx"),
		optSym(&s.statusName, "cublasGetStatusName"),
		optSym(&s.statusString, "cublasGetStatusString"),
	}
}

// CUBLAS loads cuBLAS on first call (libcublas.so, then the versioned names
// and the usual CUDA install directories) and returns it. When none loads the
// error wraps ErrCUBLASUnavailable and is one line.
func (l *Lib) CUBLAS() (*CUBLAS, error) {
	l.blasOnce.Do(func() { l.blas, l.blasErr = loadCUBLAS() })
	return l.blas, l.blasErr
}

func loadCUBLAS() (*CUBLAS, error) {
	h, _, err := openFirst(cublasCandidates(), preloadSibling("libcublasLt.so*"))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrCUBLASUnavailable, err)
	}
	b := &CUBLAS{}
	if err := resolve(h, b.s.specs()); err != nil {
		return nil, fmt.Errorf("%w: libcublas: %s", ErrCUBLASUnavailable, err)
	}
	b.path = dlPath(b.s.create)
	for _, p := range []struct {
		dst *int
		typ int
	}{{&b.major, 0}, {&b.minor, 1}, {&b.patch, 2}} {
		v, st := cublasGetProperty(b.s.getProperty, p.typ)
		if st != 0 {
			return nil, fmt.Errorf("%w: %s", ErrCUBLASUnavailable, b.err(st, "cublasGetProperty"))
		}
		*p.dst = v
	}
	return b, nil
}

// Version returns cuBLAS's version, e.g. 13, 0, 0.
func (b *CUBLAS) Version() (major, minor, patch int) { return b.major, b.minor, b.patch }

// Path returns the file cuBLAS was loaded from, when known.
func (b *CUBLAS) Path() string { return b.path }

var blasStatusNames = map[int32]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func (b *CUBLAS) err(st int32, op string) error {
	name := cublasStatusText(b.s.statusName, st)
	if name == "" {
		name = blasStatusNames[st]
	}
	return &BLASError{Op: op, Status: st, Name: name, Desc: cublasStatusText(b.s.statusString, st)}
}

// DataType is a cudaDataType_t: the element type of a GEMM operand.
type DataType int

// Element types for GEMM operands.
const (
	F32  DataType = 0  // CUDA_R_32F
	F16  DataType = 2  // CUDA_R_16F
	BF16 DataType = 14 // CUDA_R_16BF
)

// String returns the type's short name, e.g. "bf16".
func (t DataType) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	}
	return "datatype(" + strconv.Itoa(int(t)) + ")"
}

// Size returns the size of one element in bytes (0 if unknown).
func (t DataType) Size() int {
	switch t {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// ComputeType is a cublasComputeType_t: how GemmEx accumulates.
type ComputeType int

// Compute types for GemmEx.
const (
	Compute32F         ComputeType = 68 // f32 accumulation, f32 math (tensor cores for f16/bf16 inputs)
	Compute32FPedantic ComputeType = 69 // f32, no reduced-precision shortcuts
	Compute32FFastTF32 ComputeType = 77 // f32 inputs through TF32 tensor cores
	Compute32FFastBF16 ComputeType = 75 // f32 inputs rounded to bf16 for tensor cores
	Compute32FFast16F  ComputeType = 74 // f32 inputs rounded to f16 for tensor cores
)

// Transpose says whether a GEMM operand is used as stored or transposed
// (cublasOperation_t).
type Transpose int

// Operand operations.
const (
	NoTrans Transpose = 0 // CUBLAS_OP_N
	Trans   Transpose = 1 // CUBLAS_OP_T
)

// String returns "N" or "T", as in BLAS.
func (t Transpose) String() string {
	if t == Trans {
		return "T"
	}
	return "N"
}

// MathMode is a cublasMath_t, for BLAS.SetMathMode.
type MathMode int

// Math modes.
const (
	DefaultMath                       MathMode = 0
	PedanticMath                      MathMode = 2
	TF32TensorOpMath                  MathMode = 3
	DisallowReducedPrecisionReduction MathMode = 16
)

// DefaultWorkspaceBytes is the cuBLAS workspace NewBLAS gives each handle
// (NVIDIA recommends 32 MiB on Hopper). A workspace we own is what lets
// cuBLAS calls be captured into CUDA graphs.
const DefaultWorkspaceBytes = 32 << 20

// BLAS is a cuBLAS handle bound to a Context, its stream and a workspace.
type BLAS struct {
	c       *Context
	lib     *CUBLAS
	h       uintptr
	ws      DevicePtr
	wsBytes uint64
}

// NewBLAS creates a cuBLAS handle on c, set to use c's stream and a
// workspace of DefaultWorkspaceBytes (cublasSetWorkspace_v2), so its GEMMs
// can be captured into graphs. It is destroyed by Destroy or Context.Close.
func (c *Context) NewBLAS() (*BLAS, error) {
	lib, err := c.lib.CUBLAS()
	if err != nil {
		return nil, err
	}
	if err := c.bind(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	h, st := cublasCreate(lib.s.create)
	if st != 0 {
		return nil, lib.err(st, "cublasCreate")
	}
	b := &BLAS{c: c, lib: lib, h: h}
	ws, r := cuMemAlloc(c.lib.drv.memAlloc, DefaultWorkspaceBytes)
	if r != 0 {
		cublasCall1(lib.s.destroy, h)
		return nil, c.lib.cuErr(r, fmt.Sprintf("cuMemAlloc(%d) for the cuBLAS workspace", DefaultWorkspaceBytes))
	}
	b.ws, b.wsBytes = DevicePtr(ws), DefaultWorkspaceBytes
	if st := cublasCall2(lib.s.setStream, h, c.stream.h); st != 0 {
		b.release()
		return nil, lib.err(st, "cublasSetStream")
	}
	if st := cublasSetWorkspace(lib.s.setWorkspace, h, ws, b.wsBytes); st != 0 {
		b.release()
		return nil, lib.err(st, "cublasSetWorkspace")
	}
	c.track(b)
	return b, nil
}

func (b *BLAS) release() error {
	var err error
	if st := cublasCall1(b.lib.s.destroy, b.h); st != 0 {
		err = b.lib.err(st, "cublasDestroy")
	}
	if b.ws != 0 {
		if r := cuMemFree(b.c.lib.drv.memFree, uint64(b.ws)); r != 0 && err == nil {
			err = b.c.lib.cuErr(r, "cuMemFree(cuBLAS workspace)")
		}
	}
	return err
}

// Destroy destroys the handle and frees its workspace.
func (b *BLAS) Destroy() error { return b.c.destroy(b) }

// SetStream makes later calls on the handle run on s.
func (b *BLAS) SetStream(s *Stream) error {
	if err := b.c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if st := cublasCall2(b.lib.s.setStream, b.h, s.h); st != 0 {
		return b.lib.err(st, "cublasSetStream")
	}
	// cublasSetStream resets the workspace to cuBLAS's own pool; keep ours.
	if st := cublasSetWorkspace(b.lib.s.setWorkspace, b.h, uint64(b.ws), b.wsBytes); st != 0 {
		return b.lib.err(st, "cublasSetWorkspace")
	}
	return nil
}

// SetMathMode sets the handle's math mode, e.g. TF32TensorOpMath to let f32
// GEMMs use TF32 tensor cores.
func (b *BLAS) SetMathMode(m MathMode) error {
	if err := b.c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if st := cublasSetMathMode(b.lib.s.setMathMode, b.h, int(m)); st != 0 {
		return b.lib.err(st, fmt.Sprintf("cublasSetMathMode(%d)", m))
	}
	return nil
}

// Gemm describes one cublasGemmEx call, in cuBLAS's column-major terms:
//
//	C = Alpha * op(A) * op(B) + Beta * C
//
// where op(A) is M×K, op(B) is K×N and C is M×N, every matrix stored column
// by column: element (i, j) of a matrix with leading dimension ld is at
// index i + j*ld. With TransA == NoTrans, A is stored M×K (LDA >= M); with
// Trans, A is stored K×M (LDA >= K) and used transposed; likewise B. A
// row-major matrix is the column-major storage of its transpose, which is
// how MatMulRowMajor maps row-major operands onto this call.
//
// A and B must have the same DataType. With Compute32F: F32 inputs give an
// F32 C; BF16 (or F16) inputs give an F32 or BF16 (F16) C, using tensor
// cores with f32 accumulation.
type Gemm struct {
	TransA, TransB Transpose
	M, N, K        int
	Alpha, Beta    float32
	A              DevicePtr
	AType          DataType
	LDA            int
	B              DevicePtr
	BType          DataType
	LDB            int
	C              DevicePtr
	CType          DataType
	LDC            int
	Compute        ComputeType // 0 means Compute32F
	// Batch, when above 1, makes the call cublasGemmStridedBatchedEx: Batch
	// products, product i reading A + i·StrideA, B + i·StrideB and writing
	// C + i·StrideC (strides in elements, never negative; a stride of 0
	// shares one matrix among the products, and a stride may span separate
	// allocations, as the gate and up weights of one MLP).
	Batch                     int
	StrideA, StrideB, StrideC int64
}

// gemmCall is a Gemm in the integer types passed to C.
type gemmCall struct {
	transA, transB, m, n, k int32
	alpha, beta             float32
	a, b, c                 uint64
	aType, bType, cType     int32
	lda, ldb, ldc           int32
	compute, algo           int32
	batch                   int32
	strideA, strideB        int64
	strideC                 int64
}

const gemmAlgoDefault = -1 // CUBLAS_GEMM_DEFAULT

// GemmEx runs g (cublasGemmEx) on the handle's stream. It only queues the
// work; it is allowed during stream capture.
func (b *BLAS) GemmEx(g Gemm) error {
	if g.Compute == 0 {
		g.Compute = Compute32F
	}
	op := fmt.Sprintf("cublasGemmEx(%v, %v, m=%d, n=%d, k=%d, %v×%v->%v)",
		g.TransA, g.TransB, g.M, g.N, g.K, g.AType, g.BType, g.CType)
	rowsA, rowsB := g.M, g.K
	if g.TransA == Trans {
		rowsA = g.K
	}
	if g.TransB == Trans {
		rowsB = g.N
	}
	switch {
	case g.M <= 0 || g.N <= 0 || g.K <= 0:
		return fmt.Errorf("%s: sizes must be positive", op)
	case g.LDA < rowsA || g.LDB < rowsB || g.LDC < g.M:
		return fmt.Errorf("%s: leading dimensions lda=%d ldb=%d ldc=%d too small (need >= %d, %d, %d)",
			op, g.LDA, g.LDB, g.LDC, rowsA, rowsB, g.M)
	case g.AType != g.BType:
		return fmt.Errorf("%s: A and B must have the same type", op)
	case g.Batch > 1 && (g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0):
		return fmt.Errorf("%s: negative batch strides %d, %d, %d", op, g.StrideA, g.StrideB, g.StrideC)
	case g.Batch > 1 && b.lib != nil && b.lib.s.gemmBatched == 0:
		return fmt.Errorf("%s: %w", op, ErrNoBatchedGemm)
	}
	for _, v := range []int{g.M, g.N, g.K, g.LDA, g.LDB, g.LDC, g.Batch} {
		if v > math.MaxInt32 {
			return fmt.Errorf("%s: size %d does not fit in int32", op, v)
		}
	}
	call := gemmCall{
		transA: int32(g.TransA), transB: int32(g.TransB),
		m: int32(g.M), n: int32(g.N), k: int32(g.K),
		alpha: g.Alpha, beta: g.Beta,
		a: uint64(g.A), aType: int32(g.AType), lda: int32(g.LDA),
		b: uint64(g.B), bType: int32(g.BType), ldb: int32(g.LDB),
		c: uint64(g.C), cType: int32(g.CType), ldc: int32(g.LDC),
		compute: int32(g.Compute), algo: gemmAlgoDefault,
		batch: int32(g.Batch), strideA: g.StrideA, strideB: g.StrideB, strideC: g.StrideC,
	}
	if err := b.c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if g.Batch > 1 {
		if st := cublasGemmStridedBatchedEx(b.lib.s.gemmBatched, b.h, &call); st != 0 {
			return b.lib.err(st, fmt.Sprintf("cublasGemmStridedBatchedEx(%d of %s)", g.Batch, op))
		}
		return nil
	}
	if st := cublasGemmEx(b.lib.s.gemmEx, b.h, &call); st != 0 {
		return b.lib.err(st, op)
	}
	return nil
}

// ErrNoBatchedGemm is returned by GemmEx for a batch when the loaded cuBLAS
// has no cublasGemmStridedBatchedEx (see BLAS.CanBatch).
var ErrNoBatchedGemm = errors.New("cuBLAS has no cublasGemmStridedBatchedEx")

// CanBatch reports whether GemmEx takes batches (Gemm.Batch above 1).
func (b *BLAS) CanBatch() bool { return b.lib.s.gemmBatched != 0 }

// MatMulRowMajor computes the linear layer product, all matrices row-major:
//
//	Y[m, n] = X[m, k] · W[n, k]ᵀ
//
// X holds m activation rows of k features (row stride ldx >= k elements), W
// holds n output rows of k input weights, i.e. a weight matrix stored
// [out, in] (row stride ldw >= k), and Y gets m rows of n outputs (row stride
// ldy >= n). Accumulation is in f32 (Compute32F).
//
// Supported types: X and W both F32 with Y F32; X and W both BF16 (or both
// F16) with Y F32 or of the input type. cublasGemmEx cannot mix F32
// activations with BF16 weights: cast the activations to BF16 first.
//
// In column-major terms a row-major [r, c] matrix is a column-major [c, r]
// one, so this is the cuBLAS call Yᵀ[n, m] = W[n, k] · Xᵀ[k, m], i.e.
// GemmEx with TransA = Trans (A = W, lda = ldw), TransB = NoTrans (B = X,
// ldb = ldx), M = n, N = m, K = k, ldc = ldy: the "TN" layout cuBLAS runs
// fastest.
func (b *BLAS) MatMulRowMajor(m, n, k int, x DevicePtr, ldx int, xType DataType,
	w DevicePtr, ldw int, wType DataType, y DevicePtr, ldy int, yType DataType) error {
	if xType != wType {
		return fmt.Errorf("cu: MatMulRowMajor: activations %v with weights %v are not supported by cublasGemmEx; "+
			"convert the activations to %v", xType, wType, wType)
	}
	switch {
	case xType == F32 && yType == F32:
	case (xType == BF16 || xType == F16) && (yType == F32 || yType == xType):
	default:
		return fmt.Errorf("cu: MatMulRowMajor: %v inputs with %v output not supported", xType, yType)
	}
	return b.GemmEx(Gemm{
		TransA: Trans, TransB: NoTrans,
		M: n, N: m, K: k,
		Alpha: 1, Beta: 0,
		A: w, AType: wType, LDA: ldw,
		B: x, BType: xType, LDB: ldx,
		C: y, CType: yType, LDC: ldy,
		Compute: Compute32F,
	})
}
