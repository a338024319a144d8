package models_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/models"
)

// TestOptionsParams: Int and OnOff read a param, or give the default when
// it is unset; a value they do not read is an error naming the flag.
func TestOptionsParams(t *testing.T) {
	o := models.Options{Params: map[string]string{"loops": "3", "mtp": "off", "head": "yes", "n": "x"}}
	n, err := o.Int("loops", 0)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = o.Int("unset", 7)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	_, err = o.Int("n", 0)
	require.EqualError(t, err, `--n "x": not an integer`)
	on, err := o.OnOff("mtp", true)
	require.NoError(t, err)
	require.False(t, on)
	on, err = o.OnOff("unset", true)
	require.NoError(t, err)
	require.True(t, on)
	_, err = o.OnOff("head", false)
	require.EqualError(t, err, `--head "yes": want on or off`)
}
