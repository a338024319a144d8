package reel
import (
 _ "gorgonia.org/tensor"
 _ "gonum.org/v1/gonum/blas/blas32"
 _ "github.com/google/go-cmp/cmp"
 _ "github.com/stretchr/testify/require"
)
