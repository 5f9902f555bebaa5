// Test input: the layer above.
#pragma once
