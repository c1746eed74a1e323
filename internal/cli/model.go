package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/progress"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Model weights for the reference engine"}
	var (
		config, out, dtype string
		seed               uint64
	)
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Write deterministic random weights as a Hugging Face style directory",
		Long: `Write config.json, model.safetensors (Llama tensor names) and tokenizer_config.json
(byte-level tokenizer) for a built-in configuration. The same --config and --seed always
give the same weights, bit for bit; ` + "`mooncake serve --model DIR`" + ` loads the directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return &ExitError{Code: 2, Err: fmt.Errorf("--out is required")}
			}
			bar := progress.New(cmd.ErrOrStderr(), "model init: weights", 3) // generate, write, tokenizer
			defer bar.Done()
			bar.Set(0)
			m, err := model.NewBuiltin(config, seed)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			bar.Set(1)
			dt := strings.ToUpper(dtype)
			if err := m.Save(out, dt); err != nil {
				return err
			}
			bar.Set(2)
			if err := tokenizer.WriteConfig(out); err != nil {
				return err
			}
			bar.Set(3)
			bar.Done()
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s, %d parameters, %s, seed %d)\n", out, config, m.NumParams(), dt, seed)
			return nil
		},
	}
	f := initCmd.Flags()
	f.StringVar(&config, "config", "tiny", "built-in configuration: tiny or small")
	f.Uint64Var(&seed, "seed", 1, "weight seed")
	f.StringVar(&out, "out", "", "output directory")
	f.StringVar(&dtype, "dtype", "f32", "tensor dtype: f32, f16 or bf16")
	cmd.AddCommand(initCmd)
	return cmd
}

// loadModel resolves --model: a built-in name (weights generated in memory
// from seed) or a model directory.
func loadModel(spec string, seed uint64) (*model.Model, tokenizer.ByteLevel, error) {
	for _, name := range model.BuiltinNames() {
		if spec == name {
			m, err := model.NewBuiltin(name, seed)
			return m, tokenizer.ByteLevel{}, err
		}
	}
	st, err := os.Stat(spec)
	if err != nil || !st.IsDir() {
		return nil, tokenizer.ByteLevel{}, fmt.Errorf("--model %q is neither a built-in model (%s) nor a model directory",
			spec, strings.Join(model.BuiltinNames(), ", "))
	}
	m, err := model.Load(spec)
	if err != nil {
		return nil, tokenizer.ByteLevel{}, err
	}
	tk, err := tokenizer.Load(spec, m.Config.VocabSize)
	if err != nil {
		return nil, tokenizer.ByteLevel{}, err
	}
	m.Name = filepath.Base(filepath.Clean(spec))
	return m, tk, nil
}
