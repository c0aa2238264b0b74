# Source this on a GPU machine that cannot install Debian packages:
#   . tests/gpu/device_env.sh && make gpu-test
# It unpacks the packages carried in .debs/ (fetched on a Debian machine
# with: cd .debs && apt-get download libcjson1 libcjson-dev libuv1
# libuv1-dev libcmocka0 libcmocka-dev) into /tmp/hr-deps, points the build
# at them, finds NCCL, and keeps NVLink SHARP off.
mkdir -p /tmp/hr-deps
for f in .debs/*.deb; do dpkg -x "$f" /tmp/hr-deps; done
export DEPS_PREFIX=/tmp/hr-deps
export NCCL_NVLS_ENABLE=0
if [ -z "${NCCL_HOME:-}" ]; then
  NCCL_HOME=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  export NCCL_HOME
fi
export PATH=/usr/local/cuda/bin:$PATH
