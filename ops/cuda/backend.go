// Package cuda is Reel's CUDA backend: device memory through the driver API,
// kernels written in CUDA C (kernels/*.cu, embedded) and compiled at run time
// by NVRTC for the card's architecture (cached on disk), cuBLAS for products
// of many rows, and recording of bound steps into CUDA graphs.
//
// Nothing of the CUDA toolkit is needed to build it (see internal/cu). On a
// machine without a driver New returns cu.Load's one-line error, which tests
// use as their skip reason.
//
// Every per-run value (the position, the rows a run computes) is read by the
// kernels from the call record buffer on the device, never passed as a launch
// argument, so a recorded graph serves every position. A kernel that finds a
// data-dependent error (a token id outside the vocabulary, a position past a
// slot's capacity) reports it in the backend's error record; Sync and Read
// return it as an error.
package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Options configure a Backend.
type Options struct {
	// Device is the CUDA device ordinal.
	Device int
	// F32WeightsAsBF16 stores f32 weights of at least MinConvertElems
	// elements as bf16 (halving their bytes). Only matmul and embed read such
	// weights; a smaller f32 weight (a norm's scale) stays f32.
	F32WeightsAsBF16 bool
	// CacheDir is the NVRTC compile cache ("" : cu.DefaultCacheDir).
	CacheDir string
	// Logger gets the backend's messages: the kernels' compile, which
	// takes a minute or more when the cache has no entry (nil: none).
	Logger *slog.Logger
	// Defines are extra NVRTC options for the kernels, e.g. "-DMV_LOADS=8"
	// (for tuning); the environment variable REEL_CUDA_DEFINES adds more,
	// separated by spaces.
	Defines []string
	// MatvecMaxChunk, when positive, caps the input features one warp of the
	// matvec kernels streams, splitting longer inputs across more warps of a
	// block (split-K, up to the block's warps) than filling one wave of the
	// SMs needs. 0 splits only to fill the SMs, which measured best on the
	// H200.
	MatvecMaxChunk int
	// NoPDL turns off programmatic dependent launch. With it on (sm_90 and
	// newer) each kernel may be scheduled while the previous one drains:
	// it prefetches what it reads first (its weights) into L2, then waits
	// for the previous kernel on the device (griddepcontrol.wait). On the
	// H200 it took Dory-4B's decode from 196.1 to 210.8 tok/s (one run).
	// The environment variable REEL_PDL=0 sets it.
	NoPDL bool
	// Precision is how prompt chunks use the tensor cores (see Precision);
	// the environment variable REEL_PRECISION (auto, exact or half) sets it.
	Precision Precision
	// NoBatchedGemm makes every cuBLAS product of a prompt chunk its own
	// call. Without it, products of one input by weights of one shape (the
	// gate and up products, q and g, k and v) are one strided batched call
	// where their addresses allow: fewer, fuller waves of the SMs. The
	// environment variable REEL_GEMM_BATCH=0 sets it.
	NoBatchedGemm bool
	// HalfGLU has cuBLAS write the gate and up products of a prompt chunk's
	// SwiGLU MLP (swiglu_norm_matmul) in the weights' 16-bit type rather
	// than f32, as PyTorch's bf16 MLP does: half the bytes written and read
	// between the products, one more rounding of each product (2⁻⁹ relative
	// in bf16) before SwiGLU. It applies in PrecisionAuto and PrecisionHalf
	// only. The environment variable REEL_GLU_HALF=1 sets it.
	HalfGLU bool
	// Eager makes Record keep the steps and run them one by one instead of
	// recording a CUDA graph. The environment variable REEL_GRAPHS=0 sets it.
	Eager bool
}

// Precision is how the products and attention of prompt chunks (more than
// a few rows) round f32 activations for the tensor cores. Decode rows are
// always computed in f32 against the stored weights.
type Precision int

const (
	// PrecisionAuto rounds activations to 16 bits where the model is
	// 16-bit: a product with bf16 or f16 weights rounds its input once to
	// the weights' type (as PyTorch, vLLM and llama.cpp multiply), a
	// product with quantized weights rounds its dequantized weight and its
	// input once to the format's 16-bit type (bf16 for FP8 and q4, f16 for
	// q8; the environment variable REEL_QUANT_HALF, bf16 or f16, sets it
	// for every format), and
	// attention rounds q, k, v and the probabilities to f16 (the flash
	// kernel) when the backend holds any large weight in fewer than 32 bits
	// (a bf16, f16 or quantized model). A model of f32 weights computes in
	// f32 throughout, as the goldens need.
	PrecisionAuto Precision = iota
	// PrecisionExact splits activations into two 16-bit parts (hi and the
	// rounded rest) for products with 16-bit weights and multiplies twice
	// (about 16 bits of each activation kept, about twice the time),
	// computes products with quantized weights in f32 (the weight
	// dequantized to f32, as the checkpoint means it, and an f32 GEMM;
	// several times slower), and keeps attention in f32. On dory-gotiny (bf16, 229 positions in one
	// chunk) the logits are within 5.1e-3 of the CPU exact and 4.9e-2 in
	// auto; greedy ids match the reference in both
	// (models/dory TestCUDAPromptPrecision).
	PrecisionExact
	// PrecisionHalf is auto with f16 attention whatever the weights (the
	// op table's setting, so that every fast kernel is tested).
	PrecisionHalf
)

// ParsePrecision reads a Precision by name: auto, exact or half.
func ParsePrecision(s string) (Precision, error) {
	for p, n := range precisionNames {
		if s == n {
			return Precision(p), nil
		}
	}
	return 0, fmt.Errorf("precision %q: want auto, exact or half", s)
}

var precisionNames = [...]string{"auto", "exact", "half"}

// String is the precision's name.
func (p Precision) String() string {
	if p >= 0 && int(p) < len(precisionNames) {
		return precisionNames[p]
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// MinConvertElems is the smallest f32 weight that F32WeightsAsBF16 converts.
const MinConvertElems = 1 << 16

// Buffer is device memory for one value: a pointer, the value's dtype and
// element count. A weight converted at Load keeps its value dtype (f32) and
// records the stored type.
type Buffer struct {
	ptr   cu.DevicePtr
	dt    graph.DType // the value's element type
	store graph.DType // the type of the stored elements
	n     int
	bytes int
	// owned marks an allocation (Alloc, Arena, Load) rather than a view.
	owned bool
	// weight marks a buffer from Load, which Write must not change.
	weight bool
	be     *Backend
	// half, on the view of an f32 buffer that a fused binder passes to a
	// product's binder, is a 16-bit copy of its contents that the binder
	// made already (toHalf's layout), which products reads instead of
	// converting x again.
	half *halfCopy
}

// halfCopy is f32 activations rounded to 16 bits of weight type wt: hi and,
// with PrecisionExact, lo (toHalf).
type halfCopy struct {
	wt int32
	h  [2]cu.DevicePtr
}

// DType is the value's element type.
func (b *Buffer) DType() graph.DType { return b.dt }

// Len is the number of elements.
func (b *Buffer) Len() int { return b.n }

// Addr is the device address, which a recording's signature keys on.
func (b *Buffer) Addr() uintptr { return uintptr(b.ptr) }

// Bytes is the buffer's size in bytes.
func (b *Buffer) Bytes() int { return b.bytes }

// Backend runs plans on one CUDA device.
type Backend struct {
	opts    Options
	lib     *cu.Lib
	ctx     *cu.Context
	blas    *cu.BLAS // nil when cuBLAS is unavailable: products use the tiled kernel
	kernels *kernelSet
	// bound, when not nil, collects the name of every kernel a binder
	// appends, in order (for tests that check which kernels a node takes).
	bound *[]string
	// errRec is the device's error record: i32 [code, a, b, c, ...].
	errRec cu.DevicePtr
	// owned are the allocations made through the backend, by address.
	owned map[cu.DevicePtr]*Buffer
	// scratch are allocations made by Bind (split-K partials, tables),
	// freed at Close.
	scratch []cu.DevicePtr
	// Scratch that the steps of many nodes share, one node at a time (see
	// reused): dequantized weights of the prompt products with quantized
	// weights, 16-bit activations of cuBLAS products, the gate and up
	// products of matmul_swiglu, rows normalized for norm_matmul, and the
	// f16 keys and values of the flash kernel, and gdn_scan's chunk
	// workspace.
	deq, glu, normed, kvHalf, gdn reused
	// act is the gated activation of swiglu_norm_matmul where it is
	// computed in f32 (decode rows, f32 weights).
	act reused
	// hcMix is hc_mix_matmul's activation and logits where it runs its
	// parts (prompt rows), and moe_inject_norm's combined output where it
	// runs its parts.
	hcMix reused
	half  [2]reused
	// win is a decode window's scratch on cuBLAS (window): x split in
	// 16 bits, the GEMMs' outputs, the rows' scales.
	win reused
	// queries are qkv_attention_gate's prepared queries where it runs its
	// parts.
	queries reused
	// winRows is the fewest rows of a product of 16-bit weights that
	// cuBLAS computes as a window (windowMinRows; REEL_WINDOW_CUBLAS, 0
	// for never).
	winRows int
	// flashVariant is the flash kernels' variant (REEL_FLASH_VARIANT:
	// one of flashVariants; REEL_FLASH_NARROW=1 is narrow); "" takes
	// flashOrder.
	flashVariant string
	// flashGrid is the flash grid's order (REEL_FLASH_GRID: flashGrids;
	// "" takes flashHeadsFirst's rule).
	flashGrid string
	// lowWeights says a large weight is stored in fewer than 32 bits
	// (PrecisionAuto then takes f16 attention).
	lowWeights bool
	// gdnRowByRow takes gdn_scan's recurrent kernel at any rows (tests and
	// benchmarks comparing it with the chunked form).
	gdnRowByRow bool
	// quantHalfOverride is the 16-bit type (wtype's code) of every
	// quantized prompt product (REEL_QUANT_HALF); 0: by format (quantHalf).
	quantHalfOverride int32
	// quantPromptF32 computes the quantized prompt products in f32 in
	// every precision (benchmarks comparing it with the 16-bit path).
	quantPromptF32 bool
	// qfuseRows is the most decode rows the fused quantized products take
	// in one fused launch (quant_fused.go): 0 qfuseRows, negative none
	// (REEL_QFUSE_ROWS).
	qfuseRows int
	// mv overrides the matvec launch shape (tests); zero: automatic.
	mv mvTuning
	// qsaSplit is the key chunks of decode rows' qsa_attention: 0 chooses
	// (qsaSplits), a positive number forces them, −1 takes the unsplit
	// kernel (REEL_QSA_SPLIT: a number or off).
	qsaSplit int
	// moeWindowRows is the fewest rows of an expert product's window form
	// (moe_expert_window; 0: never) and moeWindowFPW the features each of
	// its warps takes (0: moeWindowFPW chooses); REEL_MOE_WINDOW and
	// REEL_MOE_WINDOW_FPW (parseMoEWindow).
	moeWindowRows, moeWindowFPW int
	// attnDec is how decode attention is computed: attn_part and
	// attn_finish for one row, attn_dec in one launch from attnDecMinRows
	// (REEL_ATTN_DECODE=old or new forces either), the key chunks of
	// either (REEL_ATTN_SPLITS) and attn_dec's merge fan (REEL_ATTN_FAN).
	attnDec attnDecTune
	// pdl launches kernels with programmatic dependent launch.
	pdl    bool
	closed bool
}

// errRecWords is the length of the error record in i32 words.
const errRecWords = 8

// ErrUnavailable is wrapped by the error New returns when this machine
// cannot run the backend: no usable CUDA driver or device, or no NVRTC to
// compile the kernels. Its message is one line. Tests skip on it
// (errors.Is(err, cuda.ErrUnavailable)) and fail on any other error of New,
// such as kernels that do not compile.
var ErrUnavailable = cu.ErrUnavailable

// New opens device opts.Device, compiles the kernels (or reads them from the
// compile cache) and sets up cuBLAS when it is available. Without a usable
// driver or NVRTC the error wraps ErrUnavailable and is one line.
func New(opts Options) (*Backend, error) {
	if os.Getenv("REEL_GRAPHS") == "0" {
		opts.Eager = true
	}
	if os.Getenv("REEL_PDL") == "0" {
		opts.NoPDL = true
	}
	if os.Getenv("REEL_GEMM_BATCH") == "0" {
		opts.NoBatchedGemm = true
	}
	if os.Getenv("REEL_GLU_HALF") == "1" {
		opts.HalfGLU = true
	}
	moeRows, moeFPW, err := parseMoEWindow(os.Getenv("REEL_MOE_WINDOW"), os.Getenv("REEL_MOE_WINDOW_FPW"))
	if err != nil {
		return nil, err
	}
	if v := os.Getenv("REEL_PRECISION"); v != "" {
		p, err := ParsePrecision(v)
		if err != nil {
			return nil, fmt.Errorf("REEL_PRECISION: %w", err)
		}
		opts.Precision = p
	}
	winRows, err := parseWindowRows(os.Getenv("REEL_WINDOW_CUBLAS"))
	if err != nil {
		return nil, fmt.Errorf("REEL_WINDOW_CUBLAS: %w", err)
	}
	qh, err := parseQuantHalf(os.Getenv("REEL_QUANT_HALF"))
	if err != nil {
		return nil, err
	}
	qfr, err := parseQuantFuseRows(os.Getenv("REEL_QFUSE_ROWS"))
	if err != nil {
		return nil, err
	}
	if err := checkFlashVariant(os.Getenv("REEL_FLASH_VARIANT")); err != nil {
		return nil, fmt.Errorf("REEL_FLASH_VARIANT: %w", err)
	}
	if g := os.Getenv("REEL_FLASH_GRID"); g != "" && !slices.Contains(flashGrids, g) {
		return nil, fmt.Errorf("REEL_FLASH_GRID %q: want one of %s", g, strings.Join(flashGrids, ", "))
	}
	qmmaRows, err := parseQMMARows(os.Getenv("REEL_QMMA_ROWS"))
	if err != nil {
		return nil, fmt.Errorf("REEL_QMMA_ROWS: %w", err)
	}
	attnDec, err := parseAttnDecode(os.Getenv("REEL_ATTN_DECODE"), os.Getenv("REEL_ATTN_SPLITS"), os.Getenv("REEL_ATTN_FAN"))
	if err != nil {
		return nil, err
	}
	lib, err := cu.Load()
	if err != nil {
		return nil, err
	}
	ctx, err := lib.NewContext(opts.Device)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", opts.Device, err)
	}
	be := &Backend{opts: opts, lib: lib, ctx: ctx, owned: map[cu.DevicePtr]*Buffer{}, quantHalfOverride: qh, qfuseRows: qfr}
	be.pdl = !opts.NoPDL && ctx.CanLaunchPDL()
	be.attnDec = attnDec
	be.moeWindowRows, be.moeWindowFPW = moeRows, moeFPW
	if os.Getenv("REEL_FLASH_NARROW") == "1" {
		be.flashVariant = flashNarrow
	}
	if v := os.Getenv("REEL_FLASH_VARIANT"); v != "" {
		be.flashVariant = v
	}
	be.flashGrid = os.Getenv("REEL_FLASH_GRID")
	be.winRows = winRows
	if be.qsaSplit, err = parseQSASplit(os.Getenv("REEL_QSA_SPLIT")); err != nil {
		ctx.Close()
		return nil, fmt.Errorf("REEL_QSA_SPLIT: %w", err)
	}
	// REEL_QMMA=0 takes quant_matmul's decode rows on the CUDA cores
	// (qmvs_*) rather than the tensor cores (qmma_*); REEL_QMMA_ROWS sets
	// the fewest rows that take qmma (qmmaMinRows).
	be.mv.quantNoMMA = os.Getenv("REEL_QMMA") == "0"
	be.mv.quantMMARows = qmmaRows
	// REEL_QMV_ROW=1 takes every one-row quantized product whose codes
	// fit to the qmvr kernels, a warp whole rows (quantRow), 0 none of
	// them (quantNoRow); unset, qmvRowDefault chooses.
	switch v := os.Getenv("REEL_QMV_ROW"); v {
	case "":
	case "1":
		be.mv.quantRow = true
	case "0":
		be.mv.quantNoRow = true
	default:
		ctx.Close()
		return nil, fmt.Errorf("REEL_QMV_ROW=%q: want 1 (every one-row quantized product on the qmvr kernels), 0 (none) or unset", v)
	}
	// REEL_QMV_STAGED=0 keeps one-row quantized products on the f32
	// kernels (quantNoStaged); REEL_SLERP_STAGED=1 computes the slerp
	// before a one-row quantized product inside it (slerpStaged) and
	// REEL_QKV_ATTN=1 prepares a decode row's queries, key and value in the
	// attention's blocks (qkvFold), both off until measured on a card;
	// REEL_MV_PREFETCH_MB=N asks L2 for N MB of a matvec's weights before
	// its wait (mvPrefetch); REEL_QMVX_SHAPE=W,G,F sets the staged
	// kernels' warps a block, blocks an SM and features a unit (qmvxPlan; 0
	// for its choice).
	if err := parseDecodeSwitches(&be.mv, os.Getenv); err != nil {
		ctx.Close()
		return nil, err
	}
	if be.mv.qmvx, err = parseQMVXShape(os.Getenv("REEL_QMVX_SHAPE")); err != nil {
		ctx.Close()
		return nil, err
	}
	fail := func(err error) (*Backend, error) {
		ctx.Close()
		return nil, err
	}
	defines := append(append([]string(nil), opts.Defines...), strings.Fields(os.Getenv("REEL_CUDA_DEFINES"))...)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var one bool
	switch v := os.Getenv("REEL_KERNEL_UNITS"); v {
	case "", "file":
	case "one":
		one = true
	default:
		return fail(fmt.Errorf("REEL_KERNEL_UNITS=%q: want file (a program per kernel file, the default) or one", v))
	}
	if be.kernels, err = loadKernels(ctx, opts.CacheDir, defines, one, log); err != nil {
		if errors.Is(err, cu.ErrNVRTCUnavailable) && !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w (%w)", ErrUnavailable, err)
		}
		return fail(err)
	}
	if _, err := lib.CUBLAS(); err == nil {
		if be.blas, err = ctx.NewBLAS(); err != nil {
			return fail(fmt.Errorf("cuda: %w", err))
		}
	}
	if be.errRec, err = be.scratchAlloc(errRecWords * 4); err != nil {
		return fail(err)
	}
	if err := ctx.Memset(be.errRec, 0, errRecWords*4); err != nil {
		return fail(err)
	}
	return be, nil
}

// Name is "cuda".
func (be *Backend) Name() string { return "cuda" }

// Device describes the device, e.g. "NVIDIA H200 (sm_90, 132 SMs)".
func (be *Backend) Device() string {
	return fmt.Sprintf("%s (%s, %d SMs)", be.ctx.DeviceName(), be.ctx.Arch(), be.ctx.SMCount())
}

// HasBLAS reports whether products of many rows use cuBLAS.
func (be *Backend) HasBLAS() bool { return be.blas != nil }

// MemInfo gives the device's free and total memory in bytes.
func (be *Backend) MemInfo() (free, total uint64, err error) { return be.ctx.MemInfo() }

// MeasureCopyBandwidth measures device copy bandwidth (bytes read plus
// written per second) with copies of bytes, reps times.
func (be *Backend) MeasureCopyBandwidth(bytes uint64, reps int) (float64, error) {
	return cu.MeasureCopyBandwidth(be.ctx, bytes, reps)
}

func (be *Backend) check() error {
	if be.closed {
		return errors.New("cuda: backend is closed")
	}
	return nil
}

// buffer checks that b is a buffer of this backend.
func (be *Backend) buffer(what string, b ops.Buffer) (*Buffer, error) {
	cb, ok := b.(*Buffer)
	if !ok || cb == nil {
		return nil, fmt.Errorf("cuda: %s is a %T, not a CUDA buffer", what, b)
	}
	if cb.be != be {
		return nil, fmt.Errorf("cuda: %s belongs to another backend", what)
	}
	return cb, nil
}

func byteLen(dt graph.DType, n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("cuda: negative length %d", n)
	}
	s := dt.Size()
	if s <= 0 {
		return 0, fmt.Errorf("cuda: dtype %s has no element size", dt)
	}
	return n * s, nil
}

// alloc allocates at least one byte (the driver refuses zero).
func (be *Backend) alloc(bytes int) (cu.DevicePtr, error) {
	return be.ctx.Alloc(uint64(max(bytes, 256)))
}

// envSwitch reads the on/off switch name from getenv: unset is def, "1"
// on and "0" off; any other value is an error that says what on and off
// do.
func envSwitch(getenv func(string) string, name string, def bool, on, off string) (bool, error) {
	switch v := getenv(name); v {
	case "":
		return def, nil
	case "1":
		return true, nil
	case "0":
		return false, nil
	default:
		return def, fmt.Errorf("%s=%q: want 1 (%s) or 0 (%s)", name, v, on, off)
	}
}

// parseDecodeSwitches sets the decode tuning's switches that New reads
// from the environment (getenv): REEL_QMV_STAGED, REEL_SLERP_STAGED,
// REEL_QKV_ATTN and REEL_MV_PREFETCH_MB.
func parseDecodeSwitches(t *mvTuning, getenv func(string) string) error {
	staged, err := envSwitch(getenv, "REEL_QMV_STAGED", true,
		"one-row quantized products with x staged as 16-bit integers or halves, the default", "with x in f32")
	if err != nil {
		return err
	}
	t.quantNoStaged = !staged
	if t.slerpStaged, err = envSwitch(getenv, "REEL_SLERP_STAGED", false,
		"the slerp before a one-row quantized product computed inside it", "as its own launch, the default"); err != nil {
		return err
	}
	if t.qkvFold, err = envSwitch(getenv, "REEL_QKV_ATTN", false,
		"a decode row's queries, key and value prepared in the attention's blocks", "by qkv_prep's own launch, the default"); err != nil {
		return err
	}
	if v := getenv("REEL_MV_PREFETCH_MB"); v != "" {
		mb, err := strconv.Atoi(v)
		if err != nil || mb < 0 || mb > 1<<20 {
			return fmt.Errorf("REEL_MV_PREFETCH_MB=%q: want the megabytes of a matvec's weights asked of L2 before its wait (0: only its first two batches)", v)
		}
		t.prefetch = mb << 20
	}
	return nil
}

// reused is scratch that the bound steps of many nodes share: a node's
// steps use it from their first launch to their last, and steps run one
// node after another on the backend's one stream (recorded or not), so no
// two nodes' uses overlap. It grows by a new allocation; an older one stays
// (in scratch, freed at Close) for the steps already bound to it.
type reused struct {
	ptr   cu.DevicePtr
	bytes int
}

// reuse gives r's memory, grown to at least bytes.
func (be *Backend) reuse(r *reused, bytes int) (cu.DevicePtr, error) {
	if r.bytes < bytes {
		p, err := be.scratchAlloc(bytes)
		if err != nil {
			return 0, err
		}
		r.ptr, r.bytes = p, bytes
	}
	return r.ptr, nil
}

// scratchAlloc allocates memory that Bind keeps for its steps until Close.
func (be *Backend) scratchAlloc(bytes int) (cu.DevicePtr, error) {
	p, err := be.alloc(bytes)
	if err != nil {
		return 0, fmt.Errorf("cuda: scratch of %d bytes: %w", bytes, err)
	}
	be.scratch = append(be.scratch, p)
	return p, nil
}

// upload allocates scratch holding data (a bound step's table).
func (be *Backend) upload(data []byte) (cu.DevicePtr, error) {
	p, err := be.scratchAlloc(len(data))
	if err != nil {
		return 0, err
	}
	if err := be.ctx.HtoD(p, data); err != nil {
		return 0, err
	}
	return p, nil
}

// Alloc makes a zeroed buffer of n elements.
func (be *Backend) Alloc(dt graph.DType, n int) (ops.Buffer, error) {
	if err := be.check(); err != nil {
		return nil, err
	}
	nb, err := byteLen(dt, n)
	if err != nil {
		return nil, err
	}
	p, err := be.alloc(nb)
	if err != nil {
		return nil, err
	}
	if err := be.ctx.Memset(p, 0, uint64(max(nb, 256))); err != nil {
		be.ctx.Free(p)
		return nil, err
	}
	b := &Buffer{ptr: p, dt: dt, store: dt, n: n, bytes: nb, owned: true, be: be}
	be.owned[p] = b
	return b, nil
}

// Arena makes one zeroed block of bytes for a plan's temporaries; it reads
// as i32 elements.
func (be *Backend) Arena(bytes int) (ops.Buffer, error) {
	if err := be.check(); err != nil {
		return nil, err
	}
	if bytes < 0 {
		return nil, fmt.Errorf("cuda: arena of %d bytes", bytes)
	}
	p, err := be.alloc(bytes)
	if err != nil {
		return nil, err
	}
	if err := be.ctx.Memset(p, 0, uint64(max(bytes, 256))); err != nil {
		be.ctx.Free(p)
		return nil, err
	}
	a := &Buffer{ptr: p, dt: graph.I32, store: graph.I32, n: bytes / 4, bytes: bytes, owned: true, be: be}
	be.owned[p] = a
	return a, nil
}

// View is n elements of dt at byte offset off inside arena (any buffer of
// this backend).
func (be *Backend) View(arena ops.Buffer, off int, dt graph.DType, n int) (ops.Buffer, error) {
	a, err := be.buffer("arena", arena)
	if err != nil {
		return nil, err
	}
	nb, err := byteLen(dt, n)
	if err != nil {
		return nil, err
	}
	if off < 0 || off+nb > a.bytes {
		return nil, fmt.Errorf("cuda: view of %d bytes at offset %d outside an arena of %d bytes", nb, off, a.bytes)
	}
	if off%dt.Size() != 0 {
		return nil, fmt.Errorf("cuda: view of %s at offset %d is not aligned to its element size", dt, off)
	}
	return &Buffer{ptr: a.ptr.Offset(uint64(off)), dt: dt, store: dt, n: n, bytes: nb, be: be}, nil
}

// Load uploads a weight once: bf16 and f16 stay as they are; f32 stays f32
// unless Options.F32WeightsAsBF16 converts it (see MinConvertElems).
func (be *Backend) Load(dt graph.DType, n int, data []byte) (ops.Buffer, error) {
	if err := be.check(); err != nil {
		return nil, err
	}
	nb, err := byteLen(dt, n)
	if err != nil {
		return nil, err
	}
	if len(data) != nb {
		return nil, fmt.Errorf("cuda: load of %d %s elements from %d bytes, want %d", n, dt, len(data), nb)
	}
	store := be.weightStore(dt, n)
	if store != dt {
		f := make([]float32, n)
		half.DecodeF32(f, data)
		data = make([]byte, 2*n)
		half.EncodeBF16(data, f)
		store, nb = graph.BF16, 2*n
	}
	p, err := be.alloc(nb)
	if err != nil {
		return nil, err
	}
	if err := be.ctx.HtoD(p, data); err != nil {
		be.ctx.Free(p)
		return nil, err
	}
	return be.addWeight(p, dt, store, n, nb), nil
}

// weightStore is the type a weight of dt and n elements is stored in on
// the card: dt, or bf16 for a large f32 one with F32WeightsAsBF16.
func (be *Backend) weightStore(dt graph.DType, n int) graph.DType {
	if dt == graph.F32 && be.opts.F32WeightsAsBF16 && n >= MinConvertElems {
		return graph.BF16
	}
	return dt
}

// addWeight records the weight of n elements of dt, stored at p as nb
// bytes of store: a buffer the backend owns and no write changes, and, a
// large one stored in fewer than 32 bits, what PrecisionAuto looks at.
func (be *Backend) addWeight(p cu.DevicePtr, dt, store graph.DType, n, nb int) *Buffer {
	b := &Buffer{ptr: p, dt: dt, store: store, n: n, bytes: nb, owned: true, weight: true, be: be}
	be.owned[p] = b
	if store != graph.F32 && n >= MinConvertElems {
		be.lowWeights = true
	}
	return b
}

// Write copies data into dst from its start, ordered on the backend's
// stream after the steps enqueued so far (so a later replay sees it).
func (be *Backend) Write(dst ops.Buffer, data []byte) error {
	if err := be.check(); err != nil {
		return err
	}
	d, err := be.buffer("destination", dst)
	if err != nil {
		return err
	}
	if d.weight {
		return errors.New("cuda: write to a loaded weight")
	}
	if len(data) > d.bytes {
		return fmt.Errorf("cuda: write of %d bytes into a buffer of %d", len(data), d.bytes)
	}
	if len(data) == 0 {
		return nil
	}
	return be.ctx.HtoDAsync(d.ptr, data)
}

// Read copies the first len(dst) bytes of src out, after every step
// enqueued so far; an error a kernel reported is returned.
func (be *Backend) Read(src ops.Buffer, dst []byte) error {
	if err := be.check(); err != nil {
		return err
	}
	s, err := be.buffer("source", src)
	if err != nil {
		return err
	}
	if len(dst) > s.bytes {
		return fmt.Errorf("cuda: read of %d bytes from a buffer of %d", len(dst), s.bytes)
	}
	// The error record comes back with the data, under the same wait.
	var raw [errRecWords * 4]byte
	if err := be.ctx.DtoHWith(dst, s.ptr, raw[:], be.errRec); err != nil {
		return err
	}
	return be.recordedError(raw)
}

// CheckFinite queues check_finite over the first n values of the f32
// buffer b (ops.FiniteChecker): the next Read reports a NaN or an infinity
// among them as an error wrapping ops.ErrNotFinite. A decode token's
// logits are checked on the card in microseconds, where the host's scan
// of them took 0.1 ms (Dory 4B, 131072 values) to 0.18 ms (Qwen4-Exp,
// 248320) while the card waited for the next token.
func (be *Backend) CheckFinite(b ops.Buffer, n int) error {
	if err := be.check(); err != nil {
		return err
	}
	x, err := be.buffer("checked buffer", b)
	if err != nil {
		return err
	}
	if x.dt != graph.F32 || n < 0 || n > x.n {
		return fmt.Errorf("cuda: check of %d values of a %s buffer of %d: want f32 and at most its length", n, x.dt, x.n)
	}
	if n == 0 {
		return nil
	}
	vec := int32(0)
	if uint64(x.ptr)%16 == 0 {
		vec = 1
	}
	s := be.newSteps()
	const threads = 256
	blocks := min((n/4+threads-1)/threads, 2*be.kernels.sms)
	s.add("check_finite", [3]uint32{uint32(max(blocks, 1)), 1, 1}, [3]uint32{threads, 1, 1}, 0, x.ptr, int64(n), be.errRec, vec)
	return s.Run()
}

// Copy copies the first n elements of src into dst, on the stream.
func (be *Backend) Copy(dst, src ops.Buffer, n int) error {
	if err := be.check(); err != nil {
		return err
	}
	d, err := be.buffer("destination", dst)
	if err != nil {
		return err
	}
	s, err := be.buffer("source", src)
	if err != nil {
		return err
	}
	if d.dt != s.dt || d.store != s.store {
		return fmt.Errorf("cuda: copy of %s into %s", s.dt, d.dt)
	}
	if d.weight {
		return errors.New("cuda: copy into a loaded weight")
	}
	if n < 0 || n > d.n || n > s.n {
		return fmt.Errorf("cuda: copy of %d elements between buffers of %d and %d", n, s.n, d.n)
	}
	if n == 0 {
		return nil
	}
	return be.ctx.DtoDAsync(d.ptr, s.ptr, uint64(n*s.store.Size()))
}

// Sync waits for every step enqueued so far and returns the first error a
// kernel reported since the last Sync.
func (be *Backend) Sync() error {
	if err := be.check(); err != nil {
		return err
	}
	return be.kernelError()
}

// kernelError reads the error record (after the queued work) and clears it.
func (be *Backend) kernelError() error {
	var raw [errRecWords * 4]byte
	if err := be.ctx.DtoH(raw[:], be.errRec); err != nil {
		return err
	}
	return be.recordedError(raw)
}

// recordedError words the error record read back as raw (nil when no
// kernel reported) and clears the record on the card for the next run.
func (be *Backend) recordedError(raw [errRecWords * 4]byte) error {
	var w [errRecWords]int32
	for i := range w {
		w[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	if w[0] == 0 {
		return nil
	}
	if err := be.ctx.Memset(be.errRec, 0, errRecWords*4); err != nil {
		return err
	}
	return kernelErr(w)
}

// kernelErr words the error record's codes (kernels/common.cuh).
func kernelErr(w [errRecWords]int32) error {
	switch w[0] {
	case 1:
		return fmt.Errorf("negative position %d in the call record", w[1])
	case 2:
		return fmt.Errorf("the call record asks for %d rows of a %d-row plan", w[1], w[2])
	case 3:
		return fmt.Errorf("embed: row %d: token id %d outside the vocabulary of %d", w[1], w[2], w[3])
	case 4:
		return fmt.Errorf("kv_write: position %d past the slot's capacity of %d", w[1], w[2])
	case 5:
		return fmt.Errorf("attention: position %d past the slot's capacity of %d", w[1], w[2])
	case 6:
		return errors.New("kv_write: the slot has no rows")
	case 7:
		return fmt.Errorf("check_finite: %w", ops.ErrNotFinite)
	}
	for _, f := range familyKernelErrs {
		if err := f(w); err != nil {
			return err
		}
	}
	return fmt.Errorf("cuda: kernel error %d (%d, %d, %d)", w[0], w[1], w[2], w[3])
}

// Free releases a buffer from Alloc, Arena or Load.
func (be *Backend) Free(b ops.Buffer) error {
	if err := be.check(); err != nil {
		return err
	}
	cb, err := be.buffer("buffer", b)
	if err != nil {
		return err
	}
	if !cb.owned || be.owned[cb.ptr] != cb {
		return errors.New("cuda: free of a buffer that is not an allocation of this backend (a view, or freed already)")
	}
	delete(be.owned, cb.ptr)
	return be.ctx.Free(cb.ptr)
}

// Close releases everything the backend holds: buffers, scratch, kernels,
// cuBLAS, recordings and the device context. Closing twice does nothing.
func (be *Backend) Close() error {
	if be.closed {
		return nil
	}
	be.closed = true
	be.owned, be.scratch = nil, nil
	return be.ctx.Close()
}

// MeasureMatMulPeak measures the card's dense bf16 matrix rate (FLOP/s)
// with cuBLAS on random n×n matrices, reps products (see
// cu.MeasureMatMulPeak): the ceiling a prompt's products are measured
// against.
func (be *Backend) MeasureMatMulPeak(n, reps int) (float64, error) {
	if err := be.check(); err != nil {
		return 0, err
	}
	if be.blas == nil {
		return 0, errors.New("cuda: MeasureMatMulPeak: cuBLAS is unavailable")
	}
	return cu.MeasureMatMulPeak(be.ctx, be.blas, n, reps)
}

// MemoryInUse is the device memory in use (by every context on the card)
// and the card's total, in bytes. Reel frees nothing until Close (arenas,
// scratch and states only grow), so after a run it is the run's peak.
func (be *Backend) MemoryInUse() (used, total uint64, err error) {
	if err := be.check(); err != nil {
		return 0, 0, err
	}
	free, total, err := be.ctx.MemInfo()
	if err != nil {
		return 0, 0, err
	}
	return total - free, total, nil
}
