package optest

// familyCases are the cases of the op families (ops/deltanet.go,
// hyperconn.go, moe.go, ngram.go, sparseattn.go), with references beside
// them in this package (families_cases.go).
func familyCases() []Case { return familyOpCases() }
