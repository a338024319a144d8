package weights

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// WriteOptions say how WriteCheckpoint lays tensors out in files.
type WriteOptions struct {
	// ShardBytes, when positive, is the most bytes of tensor data a file
	// holds: past it the tensors are sharded (a tensor larger than it is
	// alone in its shard). 0 writes one file.
	ShardBytes int64
	// Metadata are more __metadata__ strings for every file (see
	// WriteFileMetadata).
	Metadata map[string]string
	// Wrote, when not nil, is told the bytes of each tensor's data after
	// they are written; an error it returns stops the writing (and is
	// returned).
	Wrote func(n int) error
}

// ShardName is the name of shard i (from 1) of n of a sharded checkpoint,
// as transformers' save_pretrained names them:
// model-00001-of-00004.safetensors.
func ShardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n) }

// WriteCheckpoint writes tensors as the safetensors files of a checkpoint
// folder dir (which must exist), in the order given: model.safetensors
// when they fit in one shard, else shards of at most o.ShardBytes of data
// each (ShardName) and model.safetensors.index.json, whose weight_map
// gives each tensor's shard and whose metadata.total_size is the bytes of
// all tensors' data, so that Open reads them back either way. It returns
// the names of the files it wrote. On an error the files written so far
// are left for the caller to remove (their names come back with it).
func WriteCheckpoint(dir string, tensors []NamedTensor, o WriteOptions) ([]string, error) {
	var shards [][]NamedTensor
	var size, total int64
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		if err := checkNamed(t, seen); err != nil {
			return nil, fmt.Errorf("weights.WriteCheckpoint %s: tensor %q: %w", dir, t.Name, err)
		}
		n := int64(len(t.Data))
		if len(shards) == 0 || o.ShardBytes > 0 && size > 0 && size+n > o.ShardBytes {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], t)
		size += n
		total += n
	}
	if len(shards) <= 1 {
		return []string{SingleFile}, writeFile(filepath.Join(dir, SingleFile), tensors, o.Metadata, o.Wrote)
	}
	var written []string
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := ShardName(i+1, len(shards))
		if err := writeFile(filepath.Join(dir, name), sh, o.Metadata, o.Wrote); err != nil {
			return written, err
		}
		written = append(written, name)
		for _, t := range sh {
			weightMap[t.Name] = name
		}
	}
	idx := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, weightMap}
	raw, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return written, fmt.Errorf("weights.WriteCheckpoint %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), append(raw, '\n'), 0o644); err != nil {
		return written, fmt.Errorf("weights.WriteCheckpoint: %w", err)
	}
	return append(written, IndexFile), nil
}
