"""Published reliability data shared by the agreement tests (each source named with its data)."""

import numpy as np

NA = np.nan

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 observers x 12 units,
# values 1-5, missing data. The same data is Gwet (2014) Handbook of Inter-Rater Reliability, 4th ed.,
# p. 120 (irrCAC's cac.raw4raters, whose unit 12 has its single rating from another rater).
KRIPPENDORFF_C = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, NA, NA, NA],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NA, 3],
        [NA, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NA],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NA],
    ]
)
