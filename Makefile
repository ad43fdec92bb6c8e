# natsl.c — build the CPU reference trainer, its tests, and (with nvcc) the GPU trainer.
CC ?= gcc
# -Wno-format-truncation silences a gcc-only warning; clang does not know the flag (an error under -Werror)
CC_IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -qi clang && echo 1)
GCC_ONLY_FLAGS := $(if $(CC_IS_CLANG),,-Wno-format-truncation)
WARNFLAGS = -Wall -Wextra -Werror -Wno-unused-function $(GCC_ONLY_FLAGS)
# -fno-finite-math-only: the program detects inf and NaN (a step whose gradient norm is not finite, a corrupt
# checkpoint); under -ffinite-math-only clang folds those checks away
# clang splits the gemm micro-kernel's 16-float vectors into two 256-bit halves unless told to use 512-bit registers
# where the CPU has them (gcc does); elsewhere the flag changes nothing
CLANG_ONLY_FLAGS := $(if $(CC_IS_CLANG),-mprefer-vector-width=512)
# UBSAN=1: the same build with UndefinedBehaviorSanitizer, every report fatal (CI runs make test so with clang-19)
UBSANFLAGS = $(if $(UBSAN),-fsanitize=undefined -fno-sanitize-recover=all)
CFLAGS ?= -O3 -march=native -ffast-math -fno-finite-math-only $(WARNFLAGS) $(CLANG_ONLY_FLAGS) $(UBSANFLAGS)
# gcc 13's loop unswitching miscompiles layer_acts_layout at -O3 (the gradient layout of an A layer lost its fields:
# GCC PR 109934): off from gcc 13 on, for the C programs and for nvcc's host compiler
GCC_MAJOR = $(if $(CC_IS_CLANG),0,$(firstword $(subst ., ,$(shell $(CC) -dumpversion 2>/dev/null))))
NO_UNSWITCH = $(if $(shell test "$(1)" -ge 13 2>/dev/null && echo y),-fno-unswitch-loops)
FIXFLAGS = $(call NO_UNSWITCH,$(GCC_MAJOR))
OMPFLAGS ?= -fopenmp
LDLIBS = -lm
HEADERS = common/baseline.h common/dist.h common/config.h common/dataloader.h common/tokenizer.h common/checkpoint.h common/train_util.h common/layout.h common/dump.h common/budget.h common/fileio.h common/model_routing.inc common/model_io.inc common/train_main.inc common/evalset.h

.PHONY: all test clean sanitize sanitize-quick

all: train_natsl test_natsl

train_natsl: train_natsl.c $(HEADERS)
	$(CC) $(CFLAGS) $(FIXFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)

# the tests include train_natsl.c and run it in double precision
test_natsl: test_natsl.c train_natsl.c $(HEADERS)
	$(CC) $(CFLAGS) $(FIXFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)

# the CPU benchmarks of dev/ (they include train_natsl.c; CI builds them so that they keep compiling)
bench_cpu: dev/bench_cpu.c train_natsl.c $(HEADERS) dev/model_flops.h
	$(CC) $(CFLAGS) $(FIXFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)
bench_matmul: dev/bench_matmul.c train_natsl.c $(HEADERS)
	$(CC) $(CFLAGS) $(FIXFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)

# the GPU trainer (CUDA 12+/13, sm_90a = H100/H200); needs nvcc, cuBLAS and NCCL (several GPUs). NCCL is looked for
# in NCCL_HOME, the system (/usr) and the CUDA toolkit, in that order; USE_MPI=1 adds mpirun's rank discovery and
# -pi mpi (MPI's flags from mpicc --showme).
NVCC ?= nvcc
NVCCFLAGS ?= -O3 -arch=compute_90a -code=sm_90a -std=c++17 -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-function,-Wno-format-truncation
# every launch on the thread's default stream, which the decoder's CUDA graphs capture (train_natsl.cu, appendix A)
NVCCFLAGS += --default-stream per-thread
HOST_GXX_MAJOR = $(firstword $(subst ., ,$(shell g++ -dumpversion 2>/dev/null)))
NVCCFLAGS += $(if $(call NO_UNSWITCH,$(HOST_GXX_MAJOR)),-Xcompiler -fno-unswitch-loops)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v $(NVCC) 2>/dev/null)))
NCCL_PAIRS = $(if $(NCCL_HOME),$(NCCL_HOME)/include:$(NCCL_HOME)/lib) /usr/include:/usr/lib/x86_64-linux-gnu \
             /usr/include:/usr/lib/aarch64-linux-gnu $(CUDA_HOME)/include:$(CUDA_HOME)/lib $(CUDA_HOME)/include:$(CUDA_HOME)/lib64
NCCL_PAIR := $(firstword $(foreach p,$(NCCL_PAIRS),$(if $(and $(wildcard $(word 1,$(subst :, ,$(p)))/nccl.h),$(wildcard $(word 2,$(subst :, ,$(p)))/libnccl.so*)),$(p))))
NCCL_INC = $(word 1,$(subst :, ,$(NCCL_PAIR)))
NCCL_LIB = $(word 2,$(subst :, ,$(NCCL_PAIR)))
NCCL_FLAGS = -I$(NCCL_INC) -L$(NCCL_LIB) -Xlinker -rpath,$(NCCL_LIB) -lnccl
MPI_ON = -DUSE_MPI $(addprefix -I,$(shell mpicc --showme:incdirs)) $(addprefix -L,$(shell mpicc --showme:libdirs)) -lmpi
MPI_FLAGS = $(if $(filter 1,$(USE_MPI)),$(MPI_ON))
GPU_LIBS = -lcublasLt -lcublas $(NCCL_FLAGS) $(MPI_FLAGS)
train_natsl_cu: train_natsl.cu $(HEADERS) dev/model_flops.h
	@test -n "$(NCCL_PAIR)" || { echo "train_natsl_cu needs NCCL: no nccl.h with libnccl.so in $(NCCL_PAIRS) (set NCCL_HOME)"; exit 1; }
	$(NVCC) $(NVCCFLAGS) -I. $< -o $@ $(GPU_LIBS)
# the same with MPI, under its own name (CI compiles both)
train_natsl_cu_mpi: train_natsl.cu $(HEADERS) dev/model_flops.h
	@command -v mpicc > /dev/null || { echo "train_natsl_cu_mpi needs MPI (mpicc: e.g. apt-get install libopenmpi-dev)"; exit 1; }
	$(NVCC) $(NVCCFLAGS) -I. $< -o $@ -lcublasLt -lcublas $(NCCL_FLAGS) $(MPI_ON)
# the benchmarks and kernel harnesses of dev/ (they include train_natsl.cu)
bench_gpu: dev/bench_gpu.cu train_natsl.cu $(HEADERS) dev/model_flops.h
	$(NVCC) $(NVCCFLAGS) -I. $< -o $@ $(GPU_LIBS)

# make test also builds the GPU trainer where nvcc exists; its CPU-vs-GPU comparison runs where a GPU is
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)
test: train_natsl test_natsl $(if $(HAVE_NVCC),train_natsl_cu)
	./test_natsl

# AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer builds of the trainer and the tests.
# make sanitize: the whole test suite (its CLI tests run the sanitized trainer) and a few training steps
# with checkpoints and a resume; any sanitizer report fails. make sanitize-quick: the same on the data,
# checkpoint and CLI tests only (the hz tests resume through the sanitized trainer; the bit-identical resume
# test, 6+6 steps of the sanitized trainer, is left to make sanitize: the slowest of them) (CI).
SANFLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all $(WARNFLAGS)
# (dev/lsan_test_fixtures.supp: the layer-gradient tests' own unfreed buffers, and nothing else)
SANENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
         LSAN_OPTIONS=suppressions=dev/lsan_test_fixtures.supp:print_suppressions=0 NATSL_TRAINER=./train_natsl_san
SANRUN = out_san_run
train_natsl_san: train_natsl.c $(HEADERS)
	$(CC) $(SANFLAGS) $(FIXFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)
test_natsl_san: test_natsl.c train_natsl.c $(HEADERS)
	$(CC) $(SANFLAGS) $(FIXFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)
define SAN_STEPS
	rm -rf $(SANRUN)
	$(SANENV) ./train_natsl_san -b 1 -t 128 -x 3 -n 2 -v 2 -m 1 -s 3 -g 8 -o $(SANRUN)
	$(SANENV) ./train_natsl_san -b 1 -t 128 -x 4 -v 2 -m 1 -s 4 -g 8 -o $(SANRUN) -y 1
	$(SANENV) ./train_natsl_san -b 1 -t 64 -x 1 -v 0 -s 0 -a GNA -k 2
	rm -rf $(SANRUN)
endef
sanitize: train_natsl_san test_natsl_san
	$(SANENV) ./test_natsl_san
	$(SAN_STEPS)
	@echo "sanitize: clean"
sanitize-quick: train_natsl_san test_natsl_san
	$(SANENV) ./test_natsl_san data
	$(SANENV) ./test_natsl_san tokenizer
	$(SANENV) ./test_natsl_san checkpoint
	$(SANENV) ./test_natsl_san cli
	$(SANENV) ./test_natsl_san test_hz
	$(SAN_STEPS)
	@echo "sanitize-quick: clean"

clean:
	rm -f train_natsl test_natsl train_natsl_cu train_natsl_cu_mpi train_natsl_san test_natsl_san bench_gpu bench_cpu bench_matmul
