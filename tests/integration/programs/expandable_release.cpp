// PyTorch's expandable segments, through the fake libc10_cuda.so: pages mapped into a reserved
// range, then unmapped and released while the range stays reserved. Not a pause.
//   expandable_release PAGE_MIB PAGES
#include <cstdio>
#include <cstdlib>

extern "C" int fake_c10_expandable_grow_and_release(size_t pageBytes, int pages);

int main(int argc, char** argv)
{
    const size_t page = size_t(argc > 1 ? std::atoi(argv[1]) : 20) << 20;
    const int pages = argc > 2 ? std::atoi(argv[2]) : 8;
    const int rc = fake_c10_expandable_grow_and_release(page, pages);
    std::printf("expandable: %d pages of %zu bytes mapped and released: %d\n", pages, page, rc);
    return rc;
}
