"""COCO instances / keypoints JSON as an import source."""
