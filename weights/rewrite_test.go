package weights

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRewrite(t *testing.T) {
	src := "../testdata/dory/dory-tiny-per_loop"
	dst := t.TempDir()
	err := Rewrite(src, dst,
		func(c map[string]any) { c["hidden_size"] = 65 },
		func(ts []NamedTensor) []NamedTensor { return ts[1:] })
	require.NoError(t, err)
	cfg, err := ReadConfig(dst + "/config.json")
	require.NoError(t, err)
	h, err := cfg.Int("hidden_size", 0)
	require.NoError(t, err)
	require.Equal(t, 65, h)

	orig, err := Open(src)
	require.NoError(t, err)
	defer orig.Close()
	got, err := Open(dst)
	require.NoError(t, err)
	defer got.Close()
	names := orig.Names()
	require.Equal(t, names[1:], got.Names(), "the first tensor was dropped, the rest kept")
	for _, n := range names[1:] {
		a, err := orig.Bytes(n)
		require.NoError(t, err)
		b, err := got.Bytes(n)
		require.NoError(t, err)
		require.Equal(t, a, b, n)
	}
	require.Error(t, Rewrite(t.TempDir(), dst, nil, nil), "a folder without config.json")
}
