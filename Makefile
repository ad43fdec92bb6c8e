# natsl.c — build the CPU reference trainer, its tests, and (with nvcc) the GPU trainer.
CC ?= gcc
CFLAGS ?= -O3 -march=native -ffast-math -Wall -Wextra -Werror -Wno-unused-function -Wno-format-truncation
OMPFLAGS ?= -fopenmp
LDLIBS = -lm
HEADERS = common/config.h common/dataloader.h common/tokenizer.h common/checkpoint.h common/train_util.h common/layout.h common/train_main.h common/model_io.h common/dump.h common/budget.h

.PHONY: all test clean

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

clean:
	rm -f train_natsl test_natsl train_natsl_cu
