# natsl.c — build the CPU reference trainer, its tests, and (with nvcc) the GPU trainer.
CC ?= gcc
# -Wno-format-truncation silences a gcc-only warning; clang does not know the flag (an error under -Werror)
CC_IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -qi clang && echo 1)
GCC_ONLY_FLAGS := $(if $(CC_IS_CLANG),,-Wno-format-truncation)
WARNFLAGS = -Wall -Wextra -Werror -Wno-unused-function $(GCC_ONLY_FLAGS)
CFLAGS ?= -O3 -march=native -ffast-math $(WARNFLAGS)
OMPFLAGS ?= -fopenmp
LDLIBS = -lm
HEADERS = common/baseline.h common/config.h common/dataloader.h common/tokenizer.h common/checkpoint.h common/train_util.h common/layout.h common/train_main.h common/model_io.h common/dump.h common/budget.h

.PHONY: all test clean sanitize sanitize-quick

all: train_natsl test_natsl

train_natsl: train_natsl.c $(HEADERS)
	$(CC) $(CFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)

# the tests include train_natsl.c and run it in double precision
test_natsl: test_natsl.c train_natsl.c $(HEADERS)
	$(CC) $(CFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)

# the GPU trainer (CUDA 12+/13, sm_90 = H100/H200); needs nvcc and cuBLAS
NVCC ?= nvcc
NVCCFLAGS ?= -O3 -arch=sm_90 -std=c++17 -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-function,-Wno-format-truncation
train_natsl_cu: train_natsl.cu $(HEADERS)
	$(NVCC) $(NVCCFLAGS) -I. $< -o $@ -lcublas

# make test also builds the GPU trainer where nvcc exists; its CPU-vs-GPU comparison runs where a GPU is
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)
test: train_natsl test_natsl $(if $(HAVE_NVCC),train_natsl_cu)
	./test_natsl

# AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer builds of the trainer and the tests.
# make sanitize: the whole test suite (its CLI tests run the sanitized trainer) and a few training steps
# with checkpoints and a resume; any sanitizer report fails. make sanitize-quick: the same on the data,
# checkpoint and CLI tests only (the hz tests resume through the sanitized trainer; the bit-identical resume
# test, 6+6 steps of the sanitized trainer, is left to make sanitize: 17 min on a loaded machine) (CI).
SANFLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all $(WARNFLAGS)
# (dev/lsan_test_fixtures.supp: the layer-gradient tests' own unfreed buffers, and nothing else)
SANENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
         LSAN_OPTIONS=suppressions=dev/lsan_test_fixtures.supp:print_suppressions=0 NATSL_TRAINER=./train_natsl_san
SANRUN = out_san_run
train_natsl_san: train_natsl.c $(HEADERS)
	$(CC) $(SANFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)
test_natsl_san: test_natsl.c train_natsl.c $(HEADERS)
	$(CC) $(SANFLAGS) $(OMPFLAGS) -I. $< -o $@ $(LDLIBS)
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
	rm -f train_natsl test_natsl train_natsl_cu train_natsl_san test_natsl_san
