package cu

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strings"
)

// NVRTC is the loaded NVRTC runtime compiler library. It is safe for
// concurrent use.
type NVRTC struct {
	s            nvrtcSyms
	path         string
	major, minor int
}

type nvrtcSyms struct {
	version, createProgram, compileProgram, getProgramLogSize, getProgramLog,
	getPTXSize, getPTX, getCUBINSize, getCUBIN, destroyProgram, getErrorString uintptr
}

func (s *nvrtcSyms) specs() []symSpec {
	return []symSpec{
		sym(&s.version, "nvrtcVersion"),
		sym(&s.createProgram, "nvrtcCreateProgram"),
		sym(&s.compileProgram, "nvrtcCompileProgram"),
		sym(&s.getProgramLogSize, "nvrtcGetProgramLogSize"),
		sym(&s.getProgramLog, "nvrtcGetProgramLog"),
		sym(&s.getPTXSize, "nvrtcGetPTXSize"),
		sym(&s.getPTX, "nvrtcGetPTX"),
		sym(&s.getCUBINSize, "nvrtcGetCUBINSize"),
		sym(&s.getCUBIN, "nvrtcGetCUBIN"),
		sym(&s.destroyProgram, "nvrtcDestroyProgram"),
		sym(&s.getErrorString, "nvrtcGetErrorString"),
	}
}

// NVRTC loads the NVRTC library on first call (libnvrtc.so, then the
// versioned names and the usual CUDA install directories) and returns it.
// When none loads the error wraps ErrNVRTCUnavailable and is one line.
func (l *Lib) NVRTC() (*NVRTC, error) {
	l.nvrtcOnce.Do(func() { l.nvrtc, l.nvrtcErr = loadNVRTC() })
	return l.nvrtc, l.nvrtcErr
}

func loadNVRTC() (*NVRTC, error) {
	h, _, err := openFirst(nvrtcCandidates(), preloadSibling("libnvrtc-builtins.so*"))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNVRTCUnavailable, err)
	}
	n := &NVRTC{}
	if err := resolve(h, n.s.specs()); err != nil {
		return nil, fmt.Errorf("%w: libnvrtc: %s", ErrNVRTCUnavailable, err)
	}
	n.path = dlPath(n.s.version)
	var r int32
	if n.major, n.minor, r = nvrtcVersion(n.s.version); r != 0 {
		return nil, fmt.Errorf("%w: nvrtcVersion: %s", ErrNVRTCUnavailable, nvrtcErrorString(n.s.getErrorString, r))
	}
	return n, nil
}

// Version returns NVRTC's CUDA version, e.g. 13, 0.
func (n *NVRTC) Version() (major, minor int) { return n.major, n.minor }

// Path returns the file NVRTC was loaded from, when known.
func (n *NVRTC) Path() string { return n.path }

// compileOptions returns opts with -default-device and --std=c++17 added
// where opts does not set them.
func compileOptions(opts []string) []string {
	out := make([]string, 0, len(opts)+2)
	hasPrefix := func(ps []string) bool {
		for _, o := range opts {
			for _, p := range ps {
				if strings.HasPrefix(o, p) {
					return true
				}
			}
		}
		return false
	}
	if !hasPrefix([]string{"-default-device", "--default-device"}) {
		out = append(out, "-default-device")
	}
	if !hasPrefix([]string{"--std=", "-std="}) {
		out = append(out, "--std=c++17")
	}
	return append(out, opts...)
}

// targetArch returns the value of the last --gpu-architecture / -arch option
// in opts, or "".
func targetArch(opts []string) string {
	arch := ""
	for i, o := range opts {
		for _, p := range []string{"--gpu-architecture", "-arch"} {
			switch {
			case strings.HasPrefix(o, p+"="):
				arch = o[len(p)+1:]
			case o == p && i+1 < len(opts):
				arch = opts[i+1]
			}
		}
	}
	return arch
}

// isRealArch reports whether arch names real hardware (sm_90, sm_90a), for
// which NVRTC can produce a CUBIN, rather than a virtual one (compute_90).
func isRealArch(arch string) bool { return strings.HasPrefix(arch, "sm_") }

// Compile compiles CUDA C++ source src (name is the program name used in
// messages, e.g. "saxpy.cu") with NVRTC and returns the image to pass to
// Context.LoadModule, and NVRTC's log (warnings).
//
// opts are NVRTC options: preprocessor defines ("-DTILE=128"), include paths,
// "--gpu-architecture=sm_90" and so on. "-default-device" and "--std=c++17"
// are added unless opts set them. When the architecture is a real one
// (sm_XY or sm_XYa, see Context.Arch) the image is a CUBIN (nvrtcGetCUBIN);
// otherwise (compute_XY, or none given) it is PTX, which the driver compiles
// at load time. Kernels should be declared extern "C".
//
// A failed compilation returns a *CompileError whose message includes the
// compile log.
func (n *NVRTC) Compile(src, name string, opts []string) (image []byte, log string, err error) {
	opts = compileOptions(opts)
	cubin := isRealArch(targetArch(opts))
	code, log, op, r := nvrtcCompile(&n.s, src, name, opts, cubin)
	if r != 0 {
		return nil, log, &CompileError{Op: op, Name: name, Code: r, Desc: nvrtcErrorString(n.s.getErrorString, r), Log: log}
	}
	if !cubin {
		code = trimNUL(code)
	}
	return code, log, nil
}

func trimNUL(b []byte) []byte { return bytes.TrimRight(b, "\x00") }

// Compiled is the result of CompileCached.
type Compiled struct {
	Image    []byte // CUBIN or PTX, for Context.LoadModule
	CUBIN    bool   // whether Image is a CUBIN
	Log      string // NVRTC's log; empty on a cache hit
	CacheHit bool   // whether Image came from the cache
	Path     string // the cache entry's file
	// CacheErr is set when the entry could not be written (Image is still
	// good; the next call will compile again).
	CacheErr error
}

// cacheMagic starts every cache entry; a SHA-256 of the image follows it.
const cacheMagic = "REELCU1\n"

// DefaultCacheDir returns the default compile cache directory,
// $XDG_CACHE_HOME/reel/cuda or ~/.cache/reel/cuda.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cuda: compile cache directory: %w", err)
	}
	return filepath.Join(d, "reel", "cuda"), nil
}

// CompileCached is Compile for architecture arch (e.g. "sm_90", added as
// --gpu-architecture unless empty) with a disk cache in cacheDir
// (DefaultCacheDir when ""). Entries are keyed by the SHA-256 of the source,
// name, effective options, arch and NVRTC version, written atomically
// (temporary file, then rename) and checked on read: a corrupt entry is
// compiled again and replaced.
func (n *NVRTC) CompileCached(cacheDir, src, name string, opts []string, arch string) (*Compiled, error) {
	c, compile := n.Cached(cacheDir, src, name, opts, arch)
	if compile != nil {
		return compile()
	}
	return c, nil
}

// compileInto compiles src with the effective options eff and writes the
// image to the cache entry path.
func (n *NVRTC) compileInto(path, src, name string, eff []string, cubin bool) (*Compiled, error) {
	img, log, err := n.Compile(src, name, eff)
	if err != nil {
		return nil, err
	}
	return &Compiled{Image: img, CUBIN: cubin, Log: log, Path: path, CacheErr: writeCacheEntry(path, img)}, nil
}

// Cached is CompileCached's cache read alone: the image of an intact entry
// for the same arguments (CacheHit), or, without one, the compile that
// CompileCached would do, for the caller to run when it likes (a caller
// tells its user before a long compile, or runs several at once).
func (n *NVRTC) Cached(cacheDir, src, name string, opts []string, arch string) (*Compiled, func() (*Compiled, error)) {
	path, eff, cubin, err := n.cacheEntry(cacheDir, src, name, opts, arch)
	if err != nil {
		return nil, func() (*Compiled, error) { return nil, err }
	}
	if img, ok := readCacheEntry(path); ok {
		return &Compiled{Image: img, CUBIN: cubin, CacheHit: true, Path: path}, nil
	}
	return nil, func() (*Compiled, error) { return n.compileInto(path, src, name, eff, cubin) }
}

// cacheEntry is CompileCached's cache file for its arguments, with the
// effective options and whether the image is a cubin (else PTX).
func (n *NVRTC) cacheEntry(cacheDir, src, name string, opts []string, arch string) (path string, eff []string, cubin bool, err error) {
	if cacheDir == "" {
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return "", nil, false, err
		}
	}
	if arch != "" {
		opts = append(append([]string(nil), opts...), "--gpu-architecture="+arch)
	}
	eff = compileOptions(opts)
	cubin = isRealArch(targetArch(eff))
	ext := ".ptx"
	if cubin {
		ext = ".cubin"
	}
	return filepath.Join(cacheDir, n.cacheKey(src, name, eff, arch)+ext), eff, cubin, nil
}

// cacheKey hashes everything that determines the compiler's output.
func (n *NVRTC) cacheKey(src, name string, opts []string, arch string) string {
	h := sha256.New()
	field := func(h hash.Hash, s string) {
		var l [binary.MaxVarintLen64]byte
		h.Write(l[:binary.PutUvarint(l[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	field(h, "reel/cu compile cache v1")
	field(h, fmt.Sprintf("nvrtc %d.%d", n.major, n.minor))
	field(h, arch)
	field(h, name)
	field(h, fmt.Sprint(len(opts)))
	for _, o := range opts {
		field(h, o)
	}
	field(h, src)
	return hex.EncodeToString(h.Sum(nil))
}

// readCacheEntry returns the image in path if the entry is intact.
func readCacheEntry(path string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < len(cacheMagic)+sha256.Size || string(b[:len(cacheMagic)]) != cacheMagic {
		return nil, false
	}
	sum := b[len(cacheMagic) : len(cacheMagic)+sha256.Size]
	img := b[len(cacheMagic)+sha256.Size:]
	if got := sha256.Sum256(img); !bytes.Equal(got[:], sum) || len(img) == 0 {
		return nil, false
	}
	return img, true
}

// writeCacheEntry writes img to path atomically.
func writeCacheEntry(path string, img []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cuda: compile cache: %w", err)
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("cuda: compile cache: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("cuda: compile cache: %w", err)
		}
	}()
	sum := sha256.Sum256(img)
	buf := make([]byte, 0, len(cacheMagic)+len(sum)+len(img))
	buf = append(append(append(buf, cacheMagic...), sum[:]...), img...)
	if _, err = f.Write(buf); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return nil
}
