package half

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// littleEndian reports whether the machine stores integers little-endian, in
// which case the bulk functions may view byte slices as []uint16 or []float32.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// words16 views the first n*2 bytes of b as n uint16 values when the machine
// is little-endian and b is suitably aligned; otherwise it returns nil.
// Misaligned views are avoided even where the hardware allows them, since the
// Go checkptr instrumentation (enabled by -race) rejects them.
func words16(b []byte, n int) []uint16 {
	if !littleEndian || n == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%unsafe.Alignof(uint16(0)) != 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// words32 is words16 for float32 values.
func words32(b []byte, n int) []float32 {
	if !littleEndian || n == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%unsafe.Alignof(float32(0)) != 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// DecodeBF16 converts little-endian bfloat16 values in src to float32 values
// in dst. Like copy, it converts min(len(dst), len(src)/2) elements; an odd
// trailing byte of src is ignored.
func DecodeBF16(dst []float32, src []byte) {
	n := min(len(dst), len(src)/2)
	dst = dst[:n]
	if w := words16(src, n); w != nil {
		w = w[:len(dst)]
		for i, h := range w {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

// DecodeF16 converts little-endian IEEE binary16 values in src to float32
// values in dst. Like copy, it converts min(len(dst), len(src)/2) elements;
// an odd trailing byte of src is ignored.
func DecodeF16(dst []float32, src []byte) {
	n := min(len(dst), len(src)/2)
	dst = dst[:n]
	if w := words16(src, n); w != nil {
		w = w[:len(dst)]
		for i, h := range w {
			dst[i] = F16ToF32(h)
		}
		return
	}
	for i := range dst {
		dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// DecodeF32 copies little-endian float32 values from src to dst. Like copy,
// it converts min(len(dst), len(src)/4) elements; trailing bytes of src that
// do not make a whole value are ignored.
func DecodeF32(dst []float32, src []byte) {
	n := min(len(dst), len(src)/4)
	if w := words32(src, n); w != nil {
		copy(dst, w)
		return
	}
	dst = dst[:n]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// EncodeBF16 converts the float32 values in src to little-endian bfloat16 in
// dst, rounding to nearest even as F32ToBF16 does. Like copy, it converts
// min(len(dst)/2, len(src)) elements.
func EncodeBF16(dst []byte, src []float32) {
	n := min(len(dst)/2, len(src))
	src = src[:n]
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(f))
	}
}

// EncodeF16 converts the float32 values in src to little-endian IEEE binary16
// in dst, rounding to nearest even as F32ToF16 does. Like copy, it converts
// min(len(dst)/2, len(src)) elements.
func EncodeF16(dst []byte, src []float32) {
	n := min(len(dst)/2, len(src))
	src = src[:n]
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(f))
	}
}

// EncodeF32 writes the float32 values in src to dst as little-endian bytes.
// Like copy, it converts min(len(dst)/4, len(src)) elements.
func EncodeF32(dst []byte, src []float32) {
	n := min(len(dst)/4, len(src))
	if w := words32(dst, n); w != nil {
		copy(w, src)
		return
	}
	src = src[:n]
	for i, f := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}
