#include <stdio.h>
int main(void) { puts("agent"); return 0; }
